/* The worker's filesystem view (profiles governed and strict), built in a new mount
 * namespace before the identity drop. Decisions: docs/filesystem-view.md. */
#ifndef IDENTITY_HELPER_VIEW_H
#define IDENTITY_HELPER_VIEW_H

#include <stdint.h>

#include "config.h"
#include "descriptor.h"
#include "failure.h"

/* Enters a new mount namespace, makes it rec-private (nothing propagates back to the host)
 * and builds the view the descriptor names (profile, workspace, protect, hide, tmp_size) plus
 * the config's view_path entries. Exit code 78 when a path is refused (a symlink, the wrong
 * kind, absent), 71 when the kernel refuses a mount. */
int view_enter(const struct helper_config *c, const struct descriptor *d, struct failure *f);

#endif
