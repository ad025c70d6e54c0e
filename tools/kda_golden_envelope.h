/* kda_golden_envelope.h: the fp32 envelope as the annex of a production golden case file
 * (SPEC.md §10.2, "Stored envelope"), a kda_golden_annex_fn for kda_golden_set_annex.
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_GOLDEN_ENVELOPE_H
#define KDA_GOLDEN_ENVELOPE_H

#include <stddef.h>

#include "kda_golden.h"

/* A kda_golden_annex_fn: the envelope kda conform computes from the case file at path (the
 * runner's truth of the file, streamed when kda conform would stream it), as the golden
 * object's "envelope" {"rule", "members", "window"} and the members envelope_o, envelope_ht
 * (when the problem wants final states), envelope_hc (when it has checkpoints) and
 * envelope_last.  KDA_OK or the runner's status with err. */
int kda_tool_envelope_annex(const char *path, kda_golden_annex *x, char *err, size_t errlen);

#endif
