/* Workspace uid lease records: one file per lease, `<uid_lease_dir>/<lease id>`, in a root-owned
 * 0700 directory, each written whole (temp file, fsync, rename, fsync of the directory) so a
 * crash leaves the old record or the new one, never a torn one. The record is what makes a
 * lease outlive every process: the uid stays the workspace's until a release removes it. */
#ifndef IDENTITY_HELPER_LEASE_RECORD_H
#define IDENTITY_HELPER_LEASE_RECORD_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "failure.h"

#define LEASE_RECORD_MAX 65536
#define LEASE_OWNER_MAX 64

/* Format 2 names the owner (the supervisor instance the lease is held for); format 1, written
 * by an older release, has none: `owner` is then empty and only an adoption may give it one. */
struct lease_record {
  uint32_t uid;
  char owner[LEASE_OWNER_MAX + 1];
  char workspace[PATH_MAX];
};

/* The lease directory; made 0700 when missing and `create` is set, else `*dir` is -1 when it
 * does not exist. Exit code 70 when it is not a private directory of root's. */
int lease_dir_open(const struct helper_config *c, bool create, int *dir, struct failure *f);

/* Reads the record of `id`: `*found` false when there is none. Exit code 76 on a record that
 * is not a root-owned regular file in the record format. */
int lease_record_read(int dir, const char *id, struct lease_record *record, bool *found,
                      struct failure *f);

/* Writes the record of `id` atomically (replacing any), always in format 2: `owner` must not be
 * empty. Exit code 76 on failure. */
int lease_record_write(int dir, const char *id, const struct lease_record *record,
                       struct failure *f);

/* Removes the record of `id` durably. Exit code 76 on failure. */
int lease_record_remove(int dir, const char *id, struct failure *f);

/* Every leased uid, sorted. `dir` may be -1 (no lease directory: no leases). */
struct lease_uids {
  size_t count;
  uint32_t uids[LEASE_RECORD_MAX];
};
int lease_uids_read(int dir, struct lease_uids *leased, struct failure *f);

bool lease_uids_contain(const struct lease_uids *leased, uint32_t uid);

#endif
