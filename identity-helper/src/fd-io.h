/* Whole-buffer reads and writes on a file descriptor. */
#ifndef IDENTITY_HELPER_FD_IO_H
#define IDENTITY_HELPER_FD_IO_H

#include <stdbool.h>
#include <stddef.h>

/* Writes all `len` bytes, retrying after EINTR and short writes; false on any error or a write
 * that makes no progress. */
bool write_all(int fd, const void *data, size_t len);

/* Reads until `len` bytes, end of file or an error (EINTR retried); returns the bytes read. */
size_t read_up_to(int fd, void *data, size_t len);

/* Whether the directory open at `fd` holds no entry but "." and ".."; false when it cannot be
 * read (so a caller never treats an unreadable directory as empty). */
bool directory_is_empty(int fd);

#endif
