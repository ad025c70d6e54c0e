/* plugin_hostile.c: test-only backend plugin whose every string is hostile: invalid UTF-8,
 * terminal escape sequences, U+FFFE, and more than 4 KiB of multi-byte output, so that
 * conform_hostile.sh can see that every report stays whole and well-formed (SPEC.md §7.9).
 * SPDX-License-Identifier: MIT
 *
 * params "at=open|supports|forward|print": where the hostile string comes out (open's error,
 * supports' reason, forward's last_error, or printed on stdout before a NotSupported).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_backend.h"

/* Invalid bytes, an escape sequence, a C1 CSI, U+FFFE, U+FFFF, a bidi override. */
#define HOSTILE "bad \xff\xfe\xc0\x80 \x1b[31mred\x1b[0m \xc2\x9b" "2J \xef\xbf\xbe\xef\xbf\xbf \xe2\x80\xae end"

typedef struct hhandle {
  char at[16];
} hhandle;

static int32_t h_open(const char *params, void **handle, char *err, uint32_t errlen) {
  hhandle *h = calloc(1, sizeof *h);
  if (!h) return KDA_ENOMEM;
  const char *a = strstr(params ? params : "", "at=");
  snprintf(h->at, sizeof h->at, "%s", a ? a + 3 : "supports");
  h->at[strcspn(h->at, " ,")] = 0;
  if (strcmp(h->at, "open") == 0) {
    free(h);
    snprintf(err, errlen, "%s", HOSTILE);
    return KDA_EINVAL;
  }
  *handle = h;
  return KDA_OK;
}

static void h_close(void *h) { free(h); }

static int32_t h_supports(void *handle, const kda_problem *p, char *why, uint32_t n) {
  hhandle *h = handle;
  if (strcmp(h->at, "forward") == 0) return KDA_OK;
  if (strcmp(h->at, "print") == 0) { /* 1 + 3 x 2000 bytes: the 4 KiB cut splits a "€" */
    fputc('x', stdout);
    for (int i = 0; i < 2000; i++) fputs("\xe2\x82\xac", stdout);
    fputs(HOSTILE "\n", stdout);
    fflush(stdout);
  }
  if (n) snprintf(why, n, "%s", HOSTILE);
  return KDA_EUNSUPPORTED;
}

static int32_t h_forward(void *handle, const kda_problem *p, const kda_backend_tensors *t) {
  return KDA_EINVAL;
}

static const char *h_last_error(void *handle) { return HOSTILE; }

static const kda_backend hostile = {
    KDA_BACKEND_ABI_VERSION, sizeof(kda_backend), "hostile",
    "test-only: hostile strings in every message", KDA_CLASS_FP32, KDA_BACKEND_DTYPE_F32,
    KDA_BACKEND_DTYPE_F32, 0, h_open, h_close, h_supports, h_forward, h_last_error};

KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version);
KDA_BACKEND_EXPORT const kda_backend *kda_backend_entry(uint32_t abi_version) {
  return &hostile;
}
