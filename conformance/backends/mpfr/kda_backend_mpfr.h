/* kda_backend_mpfr.h: the built-in backend `mpfr` (kda_backend_mpfr.c), in libkda-oracle.
 * SPDX-License-Identifier: MIT
 *
 * A program that links libkda-oracle adds it to the registry before using it:
 * kda_backend_builtin_add(&kda_backend_mpfr, 0) (not in the default set: it is slow).
 */
#ifndef KDA_BACKEND_MPFR_H
#define KDA_BACKEND_MPFR_H

#include "kda_backend.h"

extern const kda_backend kda_backend_mpfr;

#endif
