/* kda.c: the kda command: dispatch to the subcommands, global --help and --version.
 * SPDX-License-Identifier: MIT
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "kda_files.h"
#include "kda_tool.h"
#include "kda_version.h"

static const char usage_text[] =
    "Usage: kda SUBCOMMAND [OPTION]... [ARGUMENT]...\n"
    "       kda --help | --version\n"
    "\n"
    "Reference and conformance tools for Kimi Delta Attention (KDA).\n"
    "\n"
    "Subcommands:\n"
    "  ref      run a reference on a case file and write a result file\n"
    "  gen      generate a random case file from a description\n"
    "  inspect  list the members, manifest and problem of a vector file\n"
    "  golden   write or verify the golden sets (golden/L0, golden/L1)\n"
    "  conform  score backends, plugins or result files (SPEC.md section 7)\n"
    "  bench    throughput of the simd backend against ref-f32 and the FMA peak\n"
    "  trace    every step of one head: float64, float32 twin, certified value\n"
    "  explore  write a self-contained HTML explorer of one head's state\n"
    "\n"
    "Options:\n"
    "  -h, --help     print this help and exit\n"
    "  -V, --version  print the version and exit\n"
    "\n"
    "'kda SUBCOMMAND --help' documents the options of each subcommand.\n"
    "\n"
    "Environment:\n"
    "  KDA_GOLDEN     the golden sets' directory for 'kda conform' and 'kda golden --verify'\n"
    "                 (default: ./golden, else golden/ beside the folder holding kda, else\n"
    "                 the installed share/kda/golden)\n"
    "\n"
    "Exit status:\n"
    "  0  success\n"
    "  1  a check failed (subcommands that verify results)\n"
    "  2  usage error, I/O error or bad input (one line on standard error)\n"
    "  5  kda conform: nothing ran (no case files, or every case NotSupported)\n";

typedef struct subcommand {
  const char *name;
  int (*run)(int argc, char **argv);
} subcommand;

int kda_cmd_golden(int argc, char **argv); /* tools/kda_cmd_golden.c */

static const subcommand subcommands[] = {
    {"ref", kda_cmd_ref},
    {"gen", kda_cmd_gen},
    {"inspect", kda_cmd_inspect},
    {"golden", kda_cmd_golden},
    {"conform", kda_cmd_conform},
    {"bench", kda_cmd_bench},
    {"trace", kda_cmd_trace},
    {"explore", kda_cmd_explore},
};

/* Runs one subcommand, then makes sure everything it printed reached standard output. */
static int run_subcommand(const subcommand *s, int argc, char **argv) {
  int status = s->run(argc, argv);
  if (fflush(stdout) != 0 || ferror(stdout))
    return kda_tool_fail(s->name, "cannot write to standard output");
  return status;
}

static int print_and_flush(const char *text) {
  fputs(text, stdout);
  if (fflush(stdout) != 0 || ferror(stdout)) return kda_tool_fail(NULL, "cannot write to standard output");
  return KDA_EXIT_OK;
}

/* SIGINT, SIGTERM, SIGHUP: remove this process's temporary files (kda_files.h; a forked
 * worker or backend child removes only its own), then die of the signal as before. */
static void on_signal(int sig) {
  kda_tmp_unlink_all();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void install_cleanup(void) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
    struct sigaction old;
    /* a signal ignored by the parent (nohup) stays ignored */
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
      sigaction(sigs[i], &sa, NULL);
  }
}

int main(int argc, char **argv) {
  install_cleanup();
  kda_tool_add_backends();
  if (argc < 2) return kda_tool_usage(NULL, "missing subcommand");
  const char *name = argv[1];
  if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "help") == 0)
    return print_and_flush(usage_text);
  if (strcmp(name, "-V") == 0 || strcmp(name, "--version") == 0) {
    char line[64];
    snprintf(line, sizeof line, "kda %s\n", kda_version());
    return print_and_flush(line);
  }
  for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
    if (strcmp(name, subcommands[i].name) == 0)
      return run_subcommand(&subcommands[i], argc - 1, argv + 1);
  if (name[0] == '-') return kda_tool_usage(NULL, "unknown option '%s'", name);
  return kda_tool_usage(NULL, "unknown subcommand '%s'", name);
}
