/* kda_zip_raw.h: every member of a zip archive as stored, for checks that hash or compare
 * the bytes of a file's members (golden files' member hashes, byte-for-byte comparisons).
 * SPDX-License-Identifier: MIT
 */
#ifndef KDA_ZIP_RAW_H
#define KDA_ZIP_RAW_H

#include <stddef.h>
#include <stdint.h>

typedef struct kda_zip_member {
  char *name;
  unsigned char *data; /* the member's bytes, uncompressed */
  size_t len;
} kda_zip_member;

/* Every member of the archive at path, in archive order, each read to its end (libzip checks
 * its CRC there); a member larger than its compressed size can back is refused.  Returns the
 * count with *out (freed by kda_zip_members_free), or -1 with a message naming path. */
int64_t kda_zip_members_read(const char *path, kda_zip_member **out, char *msg,
                             size_t msglen);
void kda_zip_members_free(kda_zip_member *m, int64_t n);

#endif
