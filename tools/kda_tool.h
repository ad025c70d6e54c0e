/* kda_tool.h: helpers shared by the subcommands of the kda command (exit statuses, messages).
 * SPDX-License-Identifier: MIT
 *
 * Conventions of every subcommand:
 *   exit 0  success
 *   exit 1  a check failed (reserved for verifying subcommands)
 *   exit 2  usage error, I/O error or bad input
 * Every error is exactly one line on stderr, "kda SUB: " followed by the message (the
 * library's message names the file and the member); nothing is printed on stdout before an
 * error is known, and output files are only ever written through the atomic writer.
 */
#ifndef KDA_TOOL_H
#define KDA_TOOL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KDA_EXIT_OK 0
#define KDA_EXIT_CHECK 1
#define KDA_EXIT_USAGE 2

/* Prints "kda SUB: message" and a newline on stderr (sub may be NULL: "kda: message").
 * The message is flattened to one line (newlines become spaces).  Returns KDA_EXIT_USAGE. */
int kda_tool_fail(const char *sub, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* In a child just forked by a command (pid of the parent given): it dies with the parent
 * (PR_SET_PDEATHSIG: SIGTERM, so that its handler removes its temporary files, or SIGKILL
 * where SIGTERM is ignored), and exits at once if the parent is already gone. */
void kda_tool_child_bind(pid_t parent);

/* A usage error: "kda SUB: message (try 'kda SUB --help')".  Returns KDA_EXIT_USAGE. */
int kda_tool_usage(const char *sub, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The usage error for what getopt_long returned as '?' or ':' (unknown option, missing
 * argument).  argv and optind are getopt's.  Returns KDA_EXIT_USAGE. */
int kda_tool_bad_option(const char *sub, int c, char **argv);

/* Parses a non-negative decimal integer that fits int64_t; returns 0 on success, -1 otherwise. */
int kda_tool_parse_count(const char *s, int64_t *out);

/* Adds the built-in backends of libkda-oracle to the registry (the `mpfr` reference); every
 * program of the command calls it first. */
void kda_tool_add_backends(void);

/* The shortest decimal text that reads back as x in dtype (KDA_DTYPE_F64, F32 or F16), written
 * into buf ("nan", "inf", "-inf" for non-finite values).  Returns buf. */
char *kda_tool_format_value(double x, int32_t dtype, char *buf, size_t cap);

/* The golden sets' directory (tools/kda_tool_golden.c): $KDA_GOLDEN, else ./golden in a
 * source tree, else the installed KDA_DATADIR/golden.  Writes it into buf and the rule that
 * chose it into *source; returns 0, or -1 when that directory does not exist. */
int kda_tool_golden_dir(char *buf, size_t cap, const char **source);

/* Subcommands: argv[0] is the subcommand's name; each returns an exit status. */
int kda_cmd_ref(int argc, char **argv);
int kda_cmd_gen(int argc, char **argv);
int kda_cmd_inspect(int argc, char **argv);
int kda_cmd_conform(int argc, char **argv);
/* Removes a temporary tree the tool made (symbolic links removed, never followed). */
void kda_tool_rm_tree(const char *path);
int kda_cmd_bench(int argc, char **argv); /* tools/kda_cmd_bench.c */
int kda_cmd_trace(int argc, char **argv);   /* tools/kda_cmd_trace.c */
int kda_cmd_explore(int argc, char **argv); /* tools/kda_cmd_explore.c */

#endif
