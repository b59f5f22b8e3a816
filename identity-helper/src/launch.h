/* The launch operation: the only path that execs the worker. */
#ifndef IDENTITY_HELPER_LAUNCH_H
#define IDENTITY_HELPER_LAUNCH_H

#include "config.h"
#include "descriptor.h"
#include "failure.h"

/* Never returns on success (the worker replaced this process); returns an exit code. */
int launch_worker(const struct helper_config *c, const struct descriptor *d, struct failure *f);

/* Writes the calling process into `cgroup`, opened beneath its configured root without
 * following symlinks. Exit code 69 on refusal. */
int join_cgroup(const struct helper_config *c, const char *cgroup, struct failure *f);

#endif
