/* Dropping to a worker identity, shared by launch, probe and view. */
#ifndef IDENTITY_HELPER_IDENTITY_H
#define IDENTITY_HELPER_IDENTITY_H

#include <stdint.h>

#include "config.h"
#include "failure.h"

/* setgroups(0), setresgid, drop the bounding set and ambient caps (needs CAP_SETPCAP, so
 * before the uid switch), setresuid, then verify ids, groups, caps and no_new_privs.
 * Exit code 72 on any failure. */
int identity_drop(const struct helper_config *c, uint32_t uid, struct failure *f);

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
