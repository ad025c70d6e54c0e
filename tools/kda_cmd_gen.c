/* kda_cmd_gen.c: `kda gen`, generate a random case file from a description (SPEC.md §11.2).
 * SPDX-License-Identifier: MIT
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h"
#include "kda_tool.h"

#define SUB "gen"

static const char help_text[] =
    "Usage: kda gen DESCRIPTION... -o OUTPUT.npz\n"
    "       kda gen --list-regimes\n"
    "\n"
    "Generates the case file of a description, deterministically: the same description\n"
    "always gives the same bytes.  The words of DESCRIPTION are key=value pairs, joined\n"
    "with spaces; the manifest records them in canonical form (every key) under\n"
    "generator_info.description.  For example\n"
    "  kda gen seed=7 T=64 H=2 HV=4 K=16 V=8 regime=randn gate=softplus beta=logit \\\n"
    "          l2=fla prec=bf16 id=demo -o demo.npz\n"
    "Keys: seed, T, H, HV, K, V, seqlens (comma list; sets N and T), family (kda, gdn,\n"
    "deltanet, linear), gate (log, softplus, lower_bound), beta (prob, logit, logit_neg),\n"
    "l2 (off, fla, ggml), head_map (div, mod), layout (kv, vk), scale, lb, eps, alog (0/1),\n"
    "h0 (0/1), final (0/1), checkpoints (comma list of token indices, or log), regime, prec\n"
    "(f64, f32, bf16, f16), id.  SPEC.md section 11.2 defines them.\n"
    "The file is written atomically: on any error no output file is left behind and an\n"
    "existing OUTPUT.npz is not touched.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE    the case file to write (required unless --list-regimes)\n"
    "  -l, --list-regimes   print the value regimes (regime=NAME) and exit\n"
    "  -h, --help           print this help and exit\n"
    "\n"
    "Exit status:\n"
    "  0  the case file was written (or the list printed)\n"
    "  2  usage error, I/O error or bad description (one line on standard error)\n";

/* What each regime draws (kda_case.h, SPEC.md §11.2), by KDA_REGIME_* value. */
static const char *const regime_notes[] = {
    "q, k, v ~ N(0,1) (Irwin-Hall); g ~ -U(0,1); beta ~ U(0,1)",
    "q, k, v ~ U(0,1) as fla's tests draw them; g, beta as randn",
    "k unit-norm rows, beta ~ U(0,1): contractive",
    "g = -1e-4 everywhere (rounded to the precision)",
    "keys in a 2-dimensional subspace, full-rank queries",
    "beta * ||k||^2 up to 3 (outside the non-expansive set)",
    "every 4th gate channel decays slowly (log-decay in [-2e-4, -1e-4)), the others as randn",
    "keys in a 2-dimensional subspace and every gate channel slow as in mixed",
};

static int list_regimes(void) {
  const int n_notes = (int)(sizeof regime_notes / sizeof regime_notes[0]);
  for (int r = 0; r < 64; r++) {
    const char *name = kda_regime_name(r);
    if (!name) break;
    if (r < n_notes) printf("%-12s %s\n", name, regime_notes[r]);
    else printf("%s\n", name);
  }
  return KDA_EXIT_OK;
}

/* The description's words joined with single spaces (malloc'd), NULL when out of memory. */
static char *join_words(int n, char **words) {
  size_t len = 1;
  for (int i = 0; i < n; i++) len += strlen(words[i]) + 1;
  char *text = malloc(len);
  if (!text) return NULL;
  text[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (i) strcat(text, " ");
    strcat(text, words[i]);
  }
  return text;
}

typedef struct gen_args {
  const char *output;
  int list;
  int first_word; /* index of the description's first word in argv */
} gen_args;

/* Returns -1 to go on, or the exit status (0 after --help). */
static int parse_args(int argc, char **argv, gen_args *a) {
  static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                           {"list-regimes", no_argument, NULL, 'l'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  a->output = NULL;
  a->list = 0;
  a->first_word = 0;
  opterr = 0;
  optind = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":o:lh", longopts, NULL)) != -1) {
    switch (c) {
    case 'o': a->output = optarg; break;
    case 'l': a->list = 1; break;
    case 'h': fputs(help_text, stdout); return KDA_EXIT_OK;
    default: return kda_tool_bad_option(SUB, c, argv);
    }
  }
  a->first_word = optind;
  if (a->list) {
    if (optind < argc) return kda_tool_usage(SUB, "--list-regimes takes no DESCRIPTION");
    return -1;
  }
  if (optind >= argc) return kda_tool_usage(SUB, "missing DESCRIPTION");
  if (!a->output) return kda_tool_usage(SUB, "missing -o OUTPUT.npz");
  return -1;
}

static int generate(const char *description, const char *output) {
  char err[KDA_ERRLEN] = "";
  kda_gen_desc d;
  kda_case c;
  memset(&d, 0, sizeof d);
  memset(&c, 0, sizeof c);
  int st = kda_gen_parse(description, &d, err, sizeof err);
  if (st != KDA_OK) {
    kda_gen_desc_free(&d);
    return kda_tool_fail(SUB, "%s", err);
  }
  st = kda_gen_case(&d, &c, err, sizeof err);
  /* extra_json NULL keeps the generator's own generator_info (the canonical description,
   * seed, regime and PRNG), which kda_gen_case put into c.manifest_json. */
  if (st == KDA_OK) st = kda_case_save(output, &c, NULL, err, sizeof err);
  kda_case_free(&c);
  kda_gen_desc_free(&d);
  if (st == KDA_OK) return KDA_EXIT_OK;
  if (st == KDA_EIO && !strstr(err, output)) return kda_tool_fail(SUB, "%s: %s", output, err);
  return kda_tool_fail(SUB, "%s", err);
}

int kda_cmd_gen(int argc, char **argv) {
  gen_args a;
  int st = parse_args(argc, argv, &a);
  if (st >= 0) return st;
  if (a.list) return list_regimes();
  char *description = join_words(argc - a.first_word, argv + a.first_word);
  if (!description) return kda_tool_fail(SUB, "out of memory");
  st = generate(description, a.output);
  free(description);
  return st;
}
