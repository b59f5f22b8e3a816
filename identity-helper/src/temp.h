/* The turn temp's ownership (docs/identity-helper-protocol.md, "Turn temp ownership"): a
 * non-root supervisor creates `<temp_root>/<turn>` as its own; the helper gives it to the
 * worker uid at launch and gives the worker's tree back to the caller (op reclaim) once the
 * worker's processes are dead, so the supervisor can measure and purge it itself. */
#ifndef IDENTITY_HELPER_TEMP_H
#define IDENTITY_HELPER_TEMP_H

#include <stdint.h>

#include "config.h"
#include "descriptor.h"
#include "failure.h"

#define TEMP_MAX_DEPTH 64
#define TEMP_MAX_ENTRIES 100000

/* At launch, before the identity drop: the descriptor's temp (a directory, no symlink on its
 * path) already owned by `uid` is left as it is; one owned by the caller's real uid and lying
 * beneath a temp_root is chowned to `uid` and made 0700. Exit code 79 otherwise. */
int temp_claim(const struct helper_config *c, const char *temp, uint32_t uid, struct failure *f);

/* op reclaim: chowns every entry of the temp tree owned by the worker uid (never a regular
 * file with more than one link, never through a symlink) and the temp itself to the caller's
 * real uid and gid; prints "reclaimed N skipped M". Exit code 79 on a refusal. */
int run_reclaim(const struct helper_config *c, const struct descriptor *d, struct failure *f);

#endif
