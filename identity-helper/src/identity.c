#include "identity.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "policy.h"
#include "syntax.h"

static int read_cap_last_cap(unsigned long *last, struct failure *f) {
  char buf[32];
  int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "cannot open cap_last_cap: %s", strerror(errno));
  }
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 1 || buf[n - 1] != '\n') {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "cannot read cap_last_cap");
  }
  buf[n - 1] = '\0';
  uint64_t value = 0;
  if (!parse_decimal(buf, 63, &value)) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "cap_last_cap is not a number below 64");
  }
  *last = (unsigned long)value;
  return 0;
}

static int drop_bounding_and_ambient(struct failure *f) {
  unsigned long last = 0;
  int code = read_cap_last_cap(&last, f);
  if (code != 0) {
    return code;
  }
  for (unsigned long cap = 0; cap <= last; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "PR_CAPBSET_DROP %lu: %s", cap,
                       strerror(errno));
    }
  }
  for (unsigned long cap = 0; cap <= last; cap++) {
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 0) {
      return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "capability %lu still in bounding set", cap);
    }
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "clearing ambient capabilities: %s",
                     strerror(errno));
  }
  return 0;
}

static int read_capability_sets(uint64_t *effective, uint64_t *permitted, uint64_t *inheritable) {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capget, &header, data) != 0) {
    return -1;
  }
  *effective = ((uint64_t)data[1].effective << 32) | data[0].effective;
  *permitted = ((uint64_t)data[1].permitted << 32) | data[0].permitted;
  *inheritable = ((uint64_t)data[1].inheritable << 32) | data[0].inheritable;
  return 0;
}

/* The permitted, effective and inheritable sets emptied (uid 0, or any uid in its own user
 * namespace, keeps its capabilities through setresuid to itself). */
static int clear_capability_sets(struct failure *f) {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &header, data) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "capset(0): %s", strerror(errno));
  }
  return 0;
}

/* Uid 0 must not regain capabilities when it execs (SECBIT_NOROOT), nor keep them through a
 * uid change (SECBIT_NO_SETUID_FIXUP), and nothing may undo that. Needs CAP_SETPCAP. */
static int lock_securebits(struct failure *f) {
  unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                       SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "PR_SET_SECUREBITS: %s", strerror(errno));
  }
  return 0;
}

struct worker_identity identity_for(const struct helper_config *c, uint32_t uid) {
  struct worker_identity id = {false, uid, uid, false};
  if (c->shared) {
    id.shared = true;
    id.uid = (uint32_t)getuid();
    id.gid = (uint32_t)getgid();
    id.user_namespace = id.uid != 0;
  }
  return id;
}

static int write_proc_self(const char *name, const char *text, struct failure *f) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/%s", name);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "user namespace: open %s: %s", path,
                     strerror(errno));
  }
  size_t len = strlen(text);
  ssize_t written = write(fd, text, len);
  int saved = errno;
  close(fd);
  if (written != (ssize_t)len) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "user namespace: writing %s: %s", path,
                     strerror(saved));
  }
  return 0;
}

int identity_enter_user_namespace(const struct worker_identity *id, struct failure *f) {
  if (unshare(CLONE_NEWUSER) != 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED,
                     "unshare(user): %s (shared_uid without root needs unprivileged user "
                     "namespaces)",
                     strerror(errno));
  }
  char map[64];
  snprintf(map, sizeof map, "%u %u 1\n", id->uid, id->uid);
  int code = write_proc_self("setgroups", "deny", f);
  if (code == 0) code = write_proc_self("uid_map", map, f);
  snprintf(map, sizeof map, "%u %u 1\n", id->gid, id->gid);
  if (code == 0) code = write_proc_self("gid_map", map, f);
  return code;
}

static int verify_dropped(const struct helper_config *c, const struct worker_identity *id,
                          struct failure *f) {
  uint32_t uid = id->uid;
  uint32_t gid = id->gid;
  uid_t ruid, euid, suid;
  gid_t rgid, egid, sgid;
  if (getresuid(&ruid, &euid, &suid) != 0 || getresgid(&rgid, &egid, &sgid) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "getresuid/getresgid failed");
  }
  bool ids_ok = ruid == uid && euid == uid && suid == uid && rgid == gid && egid == gid &&
                sgid == gid && (id->shared || policy_uid_in_range(c, ruid));
  if (!ids_ok) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "ids after the switch are not all %u", uid);
  }
  /* In a user namespace the kernel refuses setgroups: the caller's groups stay, unmapped. */
  if (!id->user_namespace && getgroups(0, NULL) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "supplementary groups remain");
  }
  uint64_t effective = 1, permitted = 1, inheritable = 1;
  if (read_capability_sets(&effective, &permitted, &inheritable) != 0 || effective != 0 ||
      permitted != 0 || inheritable != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "capabilities remain after the switch");
  }
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "no_new_privs is not set");
  }
  if (id->shared && prctl(PR_GET_SECUREBITS, 0, 0, 0, 0) < 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "securebits cannot be read");
  }
  return 0;
}

int identity_drop(const struct helper_config *c, const struct worker_identity *id,
                  struct failure *f) {
  uint32_t uid = id->uid;
  uint32_t gid = id->gid;
  if (!id->shared && !policy_uid_in_range(c, uid)) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "refusing to drop to uid %u", uid);
  }
  if (!id->user_namespace && setgroups(0, NULL) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "setgroups(0): %s", strerror(errno));
  }
  if (setresgid(gid, gid, gid) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "setresgid(%u): %s", gid, strerror(errno));
  }
  int code = id->shared ? lock_securebits(f) : 0;
  if (code == 0) code = drop_bounding_and_ambient(f);
  if (code != 0) {
    return code;
  }
  if (setresuid(uid, uid, uid) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "setresuid(%u): %s", uid, strerror(errno));
  }
  /* A separate uid lost its capabilities with the switch from root; a shared one keeps them. */
  code = clear_capability_sets(f);
  if (code != 0) {
    return code;
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
  }
  return verify_dropped(c, id, f);
}

static bool status_field_hex(const char *status, const char *name, uint64_t *out) {
  const char *line = strstr(status, name);
  if (line == NULL) {
    return false;
  }
  char *end = NULL;
  errno = 0;
  unsigned long long value = strtoull(line + strlen(name), &end, 16);
  if (errno != 0 || end == line + strlen(name)) {
    return false;
  }
  *out = value;
  return true;
}

static bool read_self_status(struct identity_report *r) {
  static char status[16384];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  size_t used = 0;
  ssize_t n = 0;
  while (used < sizeof status - 1 && (n = read(fd, status + used, sizeof status - 1 - used)) > 0) {
    used += (size_t)n;
  }
  close(fd);
  status[used] = '\0';
  uint64_t nnp = 0;
  bool ok = status_field_hex(status, "\nNoNewPrivs:\t", &nnp) &&
            status_field_hex(status, "\nCapBnd:\t", &r->cap_bnd) &&
            status_field_hex(status, "\nCapEff:\t", &r->cap_eff) &&
            status_field_hex(status, "\nCapPrm:\t", &r->cap_prm);
  r->no_new_privs = (int32_t)nnp;
  return ok;
}

void identity_observe(struct identity_report *r) {
  memset(r, 0, sizeof *r);
  uid_t ruid, euid, suid;
  gid_t rgid, egid, sgid;
  getresuid(&ruid, &euid, &suid);
  getresgid(&rgid, &egid, &sgid);
  r->ruid = ruid;
  r->euid = euid;
  r->suid = suid;
  r->rgid = rgid;
  r->egid = egid;
  r->sgid = sgid;
  r->group_count = getgroups(0, NULL);
  r->status_read = read_self_status(r) ? 1 : 0;
}
