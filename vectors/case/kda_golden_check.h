/* kda_golden_check.h: a golden case file checked on its own, as the runner reads it.
 * SPDX-License-Identifier: MIT
 *
 * A golden case file (SPEC.md §10.2; made by the golden pipeline, vectors/golden/) is a case
 * file whose manifest records, in golden.members_sha256, the SHA-256 of every array member as
 * stored.  Reading one needs no part of the pipeline that made it.
 */
#ifndef KDA_GOLDEN_CHECK_H
#define KDA_GOLDEN_CHECK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Checks one golden case file on its own: every CRC, and that each array member's SHA-256 is
 * the one its manifest's golden.members_sha256 records.  Returns KDA_OK, KDA_EFORMAT (msg
 * names the member), KDA_EIO. */
int kda_golden_check_members(const char *path, char *msg, size_t msglen);
/* The same on an archive already open (kda_npz_open; every member read once more through it,
 * CRC-checked), so that a reader of the file opens it once.  Returns KDA_OK or KDA_EFORMAT
 * (msg names the member; a read error's message as kda_npz_read_blob's). */
struct kda_npz;
int kda_golden_check_members_open(struct kda_npz *z, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif
#endif
