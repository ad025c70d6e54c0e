/* kda_tool_golden.c: where the kda command finds its golden sets (SPEC.md §12.3).
 * SPDX-License-Identifier: MIT
 *
 * In order: $KDA_GOLDEN; ./golden when run in a source tree; golden/ beside the folder that
 * holds this kda (build/kda of a source tree, the bin/kda of the Python wheel); the installed
 * copy under KDA_DATADIR/golden (`make install` puts the sets in $(PREFIX)/share/kda/golden
 * and builds kda with -DKDA_DATADIR=$(PREFIX)/share/kda).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kda_tool.h"

#ifndef KDA_DATADIR
#define KDA_DATADIR "/usr/local/share/kda"
#endif

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int kda_tool_golden_dir(char *buf, size_t cap, const char **source) {
  const char *env = getenv("KDA_GOLDEN");
  if (env && *env) {
    snprintf(buf, cap, "%s", env);
    *source = "KDA_GOLDEN";
    return is_dir(buf) ? 0 : -1;
  }
  *source = "./golden";
  if (is_dir("golden")) return snprintf(buf, cap, "golden"), 0;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0; /* the folder holding kda */
    slash = strrchr(exe, '/');
    if (slash) {
      slash[1] = 0; /* its parent, with the '/' */
      *source = "beside kda";
      if ((size_t)snprintf(buf, cap, "%sgolden", exe) < cap && is_dir(buf)) return 0;
    }
  }
  *source = "the installed set";
  snprintf(buf, cap, "%s/golden", KDA_DATADIR);
  return is_dir(buf) ? 0 : -1;
}
