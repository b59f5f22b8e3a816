/* Dropping to a worker identity, shared by launch, probe and view. */
#ifndef IDENTITY_HELPER_IDENTITY_H
#define IDENTITY_HELPER_IDENTITY_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "failure.h"

/* Who a worker runs as.
 *   separate  a uid of the configured range (needs root: the setuid helper or a root caller);
 *   shared    the caller's own uid: as root with no capability at all, or, for any other uid,
 *             inside a user namespace that maps that uid (and gid) to itself only. */
struct worker_identity {
  bool shared;
  uint32_t uid;
  uint32_t gid;
  /* shared and not root: the worker lives in a user namespace of its own */
  bool user_namespace;
};

/* The identity for this run: separate with `uid` (already checked against the range), or the
 * caller's own in shared mode. */
struct worker_identity identity_for(const struct helper_config *c, uint32_t uid);

/* Shared mode without root: a new user namespace mapping only the caller's uid and gid to
 * themselves (setgroups denied, as the kernel requires of an unprivileged map). Everything
 * after it (namespaces, mounts) uses the capabilities this namespace grants and no other.
 * Exit code 71 on failure. */
int identity_enter_user_namespace(const struct worker_identity *id, struct failure *f);

/* Drops to the identity: no supplementary groups (where the kernel lets a process change
 * them), the worker ids, no capabilities in any set (bounding and ambient too), the
 * securebits that keep uid 0 from regaining any at exec, no_new_privs; then verifies all of
 * it. Exit code 72 on any failure. */
int identity_drop(const struct helper_config *c, const struct worker_identity *id,
                  struct failure *f);

/* What a process can observe about its own identity, for the probe receipt. */
struct identity_report {
  uint32_t ruid, euid, suid;
  uint32_t rgid, egid, sgid;
  int32_t group_count;
  int32_t no_new_privs;
  uint64_t cap_bnd;
  uint64_t cap_eff;
  uint64_t cap_prm;
  int32_t status_read; /* 1 when /proc/self/status was parsed */
};

void identity_observe(struct identity_report *r);

#endif
