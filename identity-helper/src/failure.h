/* A refusal: a distinct exit code and one line of reason, printed once by main(). */
#ifndef IDENTITY_HELPER_FAILURE_H
#define IDENTITY_HELPER_FAILURE_H

enum exit_code {
  EXIT_OK = 0,
  EXIT_USAGE = 64, /* bad argv, or fds 0-3 not open */
  EXIT_DESCRIPTOR_MALFORMED = 65,
  EXIT_DESCRIPTOR_UNKNOWN = 66, /* unknown version, key, op, rlimit name or profile */
  EXIT_CALLER_NOT_PERMITTED = 67,
  EXIT_UID_OUT_OF_RANGE = 68,
  EXIT_CGROUP_REFUSED = 69,
  EXIT_CONFIG_INVALID = 70,
  EXIT_NAMESPACE_FAILED = 71,
  EXIT_IDENTITY_DROP_FAILED = 72,
  EXIT_EXEC_FAILED = 73,
  EXIT_RLIMIT_REFUSED = 74,
  EXIT_PROBE_MISMATCH = 75, /* the child's identity after the drop is not what it must be */
  EXIT_INTERNAL = 76,       /* fork, pipe, read, /proc walk failures */
  EXIT_CWD_UNUSABLE = 77,
  EXIT_VIEW_REFUSED = 78, /* a view path: symlink, wrong kind or owner, absent */
  /* 79 was the host turn temp's refusal; the temp is a tmpfs in the view now */
  EXIT_UID_IN_USE = 80,          /* the uid is leased to another worker, or has live processes */
  EXIT_LEASE_REFUSED = 81,       /* no such workspace lease, or its workspace is not acceptable */
  EXIT_WORKSPACE_BUSY = 82,      /* a turn or a process holds its uid, or a mount is inside */
  EXIT_LEASE_OWNER_MISMATCH = 83 /* another owner's lease, or one without owner (older release) */
};

#define FAILURE_REASON_MAX 240

struct failure {
  int code;
  char reason[FAILURE_REASON_MAX];
};

/* Records the first failure only and returns its code, so callers can `return fail_with(...)`. */
int fail_with(struct failure *f, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
