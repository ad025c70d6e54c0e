/* kda_fixture.c: test fixture command for the streamed and sampled scoring of SPEC.md §7.10
 * and §10.2 (conformance/tests/sampled_fixture.h says what each file holds).
 * SPDX-License-Identifier: MIT
 *
 * Usage: kda_fixture sampled IN.npz OUT.npz all|runs
 *        kda_fixture generated DESCRIPTION OUT.npz none|all|runs
 *        kda_fixture grad DESCRIPTION OUT.npz   (a gradient case: grad_fixture.h)
 * make check-l2 and docs/scoring.md (the peak-memory measurement) use it.
 */
#include "sampled_fixture.h"
#include "grad_fixture.h"

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "sampled") == 0 &&
      (strcmp(argv[4], "all") == 0 || strcmp(argv[4], "runs") == 0))
    return fixture_sampled(argv[2], argv[3], strcmp(argv[4], "all") == 0), 0;
  if (argc == 5 && strcmp(argv[1], "generated") == 0) {
    const int how = strcmp(argv[4], "none") == 0 ? 0 : strcmp(argv[4], "all") == 0 ? 1
                    : strcmp(argv[4], "runs") == 0 ? 2 : -1;
    if (how >= 0) return fixture_generated(argv[2], argv[3], how), 0;
  }
  if (argc == 4 && strcmp(argv[1], "grad") == 0) return fixture_grad(argv[2], argv[3]), 0;
  fixture_die("usage", "kda_fixture sampled IN OUT all|runs | generated DESC OUT none|all|runs | grad DESC OUT");
  return 2;
}
