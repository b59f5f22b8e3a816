#include "lease-record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd-io.h"
#include "private-dir.h"
#include "syntax.h"

#define RECORD_HEADER_LEGACY "turnhost-uid-lease 1\n"
#define RECORD_HEADER "turnhost-uid-lease 2\n"
#define RECORD_MAX_BYTES (PATH_MAX + 160)

int lease_dir_open(const struct helper_config *c, bool create, int *dir, struct failure *f) {
  return private_dir_open(c->uid_lease_dir, "uid_lease_dir", create, dir, f);
}

/* The value of line `key` at `*cursor` ("key VALUE\n"), NUL-terminated in place; the cursor moves
 * past it. NULL when the line is not there. */
static char *take_line(char **cursor, const char *key) {
  size_t key_len = strlen(key);
  if (strncmp(*cursor, key, key_len) != 0 || (*cursor)[key_len] != ' ') {
    return NULL;
  }
  char *value = *cursor + key_len + 1;
  char *end = strchr(value, '\n');
  if (end == NULL) {
    return NULL;
  }
  *end = '\0';
  *cursor = end + 1;
  return value;
}

static bool is_owner_text(const char *owner) {
  size_t len = strlen(owner);
  bool valid = len >= 1 && len <= LEASE_OWNER_MAX;
  for (size_t i = 0; valid && i < len; i++) {
    char c = owner[i];
    valid = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_';
  }
  return valid;
}

/* Format 2: "turnhost-uid-lease 2\nuid N\nowner O\nworkspace PATH\n"; format 1 (an older
 * release's): the same without the owner line. Nothing else. */
static bool parse_record(char *text, struct lease_record *record) {
  bool legacy = strncmp(text, RECORD_HEADER_LEGACY, strlen(RECORD_HEADER_LEGACY)) == 0;
  if (!legacy && strncmp(text, RECORD_HEADER, strlen(RECORD_HEADER)) != 0) {
    return false;
  }
  static char no_owner[1];
  char *cursor = text + strlen(RECORD_HEADER);
  char *uid_text = take_line(&cursor, "uid");
  char *owner = uid_text == NULL ? NULL : legacy ? no_owner : take_line(&cursor, "owner");
  char *workspace = owner == NULL ? NULL : take_line(&cursor, "workspace");
  if (workspace == NULL || *cursor != '\0' || (!legacy && !is_owner_text(owner))) {
    return false;
  }
  uint64_t uid = 0;
  if (!parse_decimal(uid_text, UINT32_MAX - 1, &uid) || uid == 0 ||
      !is_canonical_absolute_path(workspace) || strlen(workspace) >= sizeof record->workspace) {
    return false;
  }
  record->uid = (uint32_t)uid;
  memcpy(record->owner, owner, strlen(owner) + 1);
  memcpy(record->workspace, workspace, strlen(workspace) + 1);
  return true;
}

static int read_record_at(int dir, const char *name, struct lease_record *record, bool *found,
                          struct failure *f) {
  static char text[RECORD_MAX_BYTES + 1];
  *found = false;
  int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) {
    return 0;
  }
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0) {
    int error = errno;
    if (fd >= 0) {
      close(fd);
    }
    return fail_with(f, EXIT_INTERNAL, "lease record %.64s: not a regular file of root's%s%s", name,
                     fd < 0 ? ": " : "", fd < 0 ? strerror(error) : "");
  }
  size_t used = read_up_to(fd, text, sizeof text - 1);
  close(fd);
  text[used] = '\0';
  if (strlen(text) != used || !parse_record(text, record)) {
    return fail_with(f, EXIT_INTERNAL, "lease record %.64s: not in the record format", name);
  }
  *found = true;
  return 0;
}

int lease_record_read(int dir, const char *id, struct lease_record *record, bool *found,
                      struct failure *f) {
  *found = false;
  if (dir < 0) {
    return 0;
  }
  return read_record_at(dir, id, record, found, f);
}

int lease_record_write(int dir, const char *id, const struct lease_record *record,
                       struct failure *f) {
  static char text[RECORD_MAX_BYTES];
  char temp[96];
  /* A lease id never starts with '.', so a temp name never is a record. */
  snprintf(temp, sizeof temp, ".%s.%ld.tmp", id, (long)getpid());
  if (!is_owner_text(record->owner)) {
    return fail_with(f, EXIT_INTERNAL, "lease record %.64s: no owner to write", id);
  }
  int len = snprintf(text, sizeof text, RECORD_HEADER "uid %u\nowner %s\nworkspace %s\n",
                     record->uid, record->owner, record->workspace);
  if (len < 0 || (size_t)len >= sizeof text) {
    return fail_with(f, EXIT_INTERNAL, "lease record %.64s: too long", id);
  }
  unlinkat(dir, temp, 0);
  int fd = openat(dir, temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fail_with(f, EXIT_INTERNAL, "lease record %.64s: create: %s", id, strerror(errno));
  }
  bool written = write_all(fd, text, (size_t)len) && fsync(fd) == 0;
  int error = errno;
  close(fd);
  if (!written || renameat(dir, temp, dir, id) != 0) {
    error = written ? errno : error;
    unlinkat(dir, temp, 0);
    return fail_with(f, EXIT_INTERNAL, "lease record %.64s: write: %s", id, strerror(error));
  }
  if (fsync(dir) != 0) {
    return fail_with(f, EXIT_INTERNAL, "lease directory: fsync: %s", strerror(errno));
  }
  return 0;
}

int lease_record_remove(int dir, const char *id, struct failure *f) {
  if (unlinkat(dir, id, 0) != 0 && errno != ENOENT) {
    return fail_with(f, EXIT_INTERNAL, "lease record %.64s: remove: %s", id, strerror(errno));
  }
  if (fsync(dir) != 0) {
    return fail_with(f, EXIT_INTERNAL, "lease directory: fsync: %s", strerror(errno));
  }
  return 0;
}

static int compare_uids(const void *a, const void *b) {
  uint32_t left = *(const uint32_t *)a;
  uint32_t right = *(const uint32_t *)b;
  return left < right ? -1 : left > right;
}

int lease_uids_read(int dir, struct lease_uids *leased, struct failure *f) {
  leased->count = 0;
  if (dir < 0) {
    return 0;
  }
  int scan = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *entries = scan < 0 ? NULL : fdopendir(scan);
  if (entries == NULL) {
    if (scan >= 0) {
      close(scan);
    }
    return fail_with(f, EXIT_INTERNAL, "lease directory: %s", strerror(errno));
  }
  int code = 0;
  struct dirent *entry;
  while (code == 0 && (entry = readdir(entries)) != NULL) {
    if (entry->d_name[0] == '.') {
      continue; /* ".", ".." and the temp files of an interrupted write */
    }
    if (leased->count == LEASE_RECORD_MAX) {
      code = fail_with(f, EXIT_INTERNAL, "lease directory: more than %d records", LEASE_RECORD_MAX);
      break;
    }
    struct lease_record record;
    bool found = false;
    code = read_record_at(dir, entry->d_name, &record, &found, f);
    if (code == 0 && found) {
      leased->uids[leased->count++] = record.uid;
    }
  }
  closedir(entries);
  if (code == 0) {
    qsort(leased->uids, leased->count, sizeof leased->uids[0], compare_uids);
  }
  return code;
}

bool lease_uids_contain(const struct lease_uids *leased, uint32_t uid) {
  return bsearch(&uid, leased->uids, leased->count, sizeof leased->uids[0], compare_uids) != NULL;
}
