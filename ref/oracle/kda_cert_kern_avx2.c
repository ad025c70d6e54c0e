/* kda_cert_kern_avx2.c: the fast certifier's step kernel compiled with -mavx2 -mfma (the
 * Makefile gives this file alone those flags; kda_cert_kernel() calls it only when the CPU
 * has both).  On other targets it is the generic kernel under another name.
 * SPDX-License-Identifier: MIT
 */
#define KDA_CERT_STEP_NAME kda_cert_step_avx2
#include "kda_cert_kern.h"
