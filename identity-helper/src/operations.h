/* The operations besides launch (launch.h) and the workspace leases (workspace-lease.h): probe
 * and view, which change nothing, and kill, which signals the worker uid's processes. */
#ifndef IDENTITY_HELPER_OPERATIONS_H
#define IDENTITY_HELPER_OPERATIONS_H

#include "config.h"
#include "descriptor.h"
#include "failure.h"

#define HELPER_VERSION "0.1.0"

int run_probe(const struct helper_config *c, const struct descriptor *d, struct failure *f);
int run_view(const struct helper_config *c, const struct descriptor *d, struct failure *f);
int run_kill(const struct helper_config *c, const struct descriptor *d, struct failure *f);

#endif
