/* kda_version.c: the library's version (kda_version.h).
 * SPDX-License-Identifier: MIT
 */
#include "kda_version.h"

const char *kda_version(void) { return KDA_VERSION_STRING; }

int kda_version_number(void) { return KDA_VERSION_NUMBER; }
