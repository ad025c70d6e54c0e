/* kda_version.h: the version of libkda and the kda command (README.md, Versions).
 * SPDX-License-Identifier: MIT
 *
 * The one place the version is written: the Makefile reads KDA_VERSION_STRING from here for
 * kda.pc and the shared library's file name.  The macros are the version of the headers a
 * program was compiled against; kda_version() is the version of the library it runs with.
 * The backend ABI has its own number (KDA_BACKEND_ABI_VERSION, kda_backend.h), and so do the
 * file schemas ("kda-case/1"); none of them moves with this one.
 */
#ifndef KDA_VERSION_H
#define KDA_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_VERSION_MAJOR 0
#define KDA_VERSION_MINOR 2
#define KDA_VERSION_PATCH 0
#define KDA_VERSION_STRING "0.2.0" /* MAJOR.MINOR.PATCH; a unit test checks they agree */
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons. */
#define KDA_VERSION_NUMBER \
  (KDA_VERSION_MAJOR * 10000 + KDA_VERSION_MINOR * 100 + KDA_VERSION_PATCH)

/* The library's KDA_VERSION_STRING ("0.2.0"); static storage. */
const char *kda_version(void);
/* The library's KDA_VERSION_NUMBER (200 for 0.2.0). */
int kda_version_number(void);

#ifdef __cplusplus
}
#endif
#endif
