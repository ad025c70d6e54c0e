/* kda_tool.c: messages, usage errors and number formatting shared by the kda subcommands.
 * SPDX-License-Identifier: MIT
 */
#include "kda_tool.h"

#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/mpfr/kda_backend_mpfr.h"
#include "kda_conform.h"
#include "kda_files.h"
#include "kda_npz.h"

/* Writes "kda[ SUB]: " + text + suffix as one line: embedded newlines become spaces, and the
 * rest is report text (kda_text_clean: no escape sequences from a path or a plugin). */
static void put_line(const char *sub, const char *text, const char *suffix) {
  char line[2048];
  snprintf(line, sizeof line, "%s%s", text, suffix ? suffix : "");
  for (char *s = line; *s; s++)
    if (*s == '\n' || *s == '\r') *s = ' ';
  kda_text_clean(line, sizeof line, line, 0);
  if (sub)
    fprintf(stderr, "kda %s: %s\n", sub, line);
  else
    fprintf(stderr, "kda: %s\n", line);
  fflush(stderr);
}

void kda_tool_child_bind(pid_t parent) {
  struct sigaction old;
  int ignored = sigaction(SIGTERM, NULL, &old) == 0 && old.sa_handler == SIG_IGN;
  prctl(PR_SET_PDEATHSIG, ignored ? SIGKILL : SIGTERM);
  if (getppid() != parent) _exit(1); /* the parent died before the line above */
}

int kda_tool_fail(const char *sub, const char *fmt, ...) {
  char text[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  put_line(sub, text, NULL);
  return KDA_EXIT_USAGE;
}

int kda_tool_usage(const char *sub, const char *fmt, ...) {
  char text[1536], hint[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  snprintf(hint, sizeof hint, " (try 'kda%s%s --help')", sub ? " " : "", sub ? sub : "");
  put_line(sub, text, hint);
  return KDA_EXIT_USAGE;
}

/* getopt_long was called with opterr = 0 and an optstring starting with ':', so it returns
 * ':' for a missing argument and '?' for anything it does not know; argv[optind - 1] is the
 * offending word in both cases for long options and for a lone short option. */
int kda_tool_bad_option(const char *sub, int c, char **argv) {
  extern int optind, optopt;
  const char *word = optind > 0 ? argv[optind - 1] : "";
  if (c == ':') {
    if (strncmp(word, "--", 2) == 0) return kda_tool_usage(sub, "option '%s' needs an argument", word);
    return kda_tool_usage(sub, "option '-%c' needs an argument", optopt);
  }
  if (strncmp(word, "--", 2) == 0) return kda_tool_usage(sub, "unknown option '%s'", word);
  if (optopt > 32 && optopt < 127) return kda_tool_usage(sub, "unknown option '-%c'", optopt);
  return kda_tool_usage(sub, "unknown option '%s'", word);
}

int kda_tool_parse_count(const char *s, int64_t *out) {
  char *end;
  if (!s || *s < '0' || *s > '9') return -1;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0) return -1;
  *out = (int64_t)x;
  return 0;
}

/* 1 when text reads back as x in the given float dtype. */
static int reads_back(const char *text, double x, int32_t dtype) {
  switch (dtype) {
  case KDA_DTYPE_F32: return strtof(text, NULL) == (float)x;
  case KDA_DTYPE_F16: return kda_round_f16(strtod(text, NULL)) == x;
  default: return strtod(text, NULL) == x;
  }
}

char *kda_tool_format_value(double x, int32_t dtype, char *buf, size_t cap) {
  if (isnan(x)) {
    snprintf(buf, cap, "nan");
  } else if (isinf(x)) {
    snprintf(buf, cap, x < 0 ? "-inf" : "inf");
  } else if (dtype == KDA_DTYPE_I64 || dtype == KDA_DTYPE_I32) {
    snprintf(buf, cap, "%.0f", x);
  } else {
    for (int prec = 1; prec <= 17; prec++) {
      snprintf(buf, cap, "%.*g", prec, x);
      if (reads_back(buf, x, dtype)) break;
    }
  }
  return buf;
}

/* Removes path and, for a directory, everything under it (symbolic links are removed, never
 * followed).  Best effort: a temporary tree the tool made itself. */
void kda_tool_rm_tree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return;
  if (S_ISDIR(sb.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[8192];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      kda_tool_rm_tree(sub);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

void kda_tool_add_backends(void) { kda_backend_builtin_add(&kda_backend_mpfr, 0); }
