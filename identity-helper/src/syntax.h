/* Small, pure checks shared by the descriptor and config parsers. */
#ifndef IDENTITY_HELPER_SYNTAX_H
#define IDENTITY_HELPER_SYNTAX_H

#include <stdbool.h>
#include <stdint.h>

/* Plain decimal: digits only, no sign, no leading zero (except "0"), value <= max. */
bool parse_decimal(const char *text, uint64_t max, uint64_t *out);

/* Absolute and canonical: starts with '/', no empty, "." or ".." components, no trailing '/'
 * (except "/" itself), shorter than PATH_MAX. */
bool is_canonical_absolute_path(const char *path);

/* Relative and canonical: not empty, no leading or trailing '/', no empty, "." or ".."
 * components, shorter than PATH_MAX. */
bool is_canonical_relative_path(const char *path);

/* True when `path` lies strictly beneath `root` (both canonical), on a component boundary. */
bool path_is_strictly_beneath(const char *path, const char *root);

#endif
