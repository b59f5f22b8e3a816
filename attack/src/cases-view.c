/*
 * The view: a root-owned host file is not writable, the supervisor's own state (data directory,
 * token) and other hidden paths are absent or an empty mask, /tmp and /dev/shm are the turn's
 * own, /proc hides other uids' processes, a protected path is masked or read-only as
 * configured, and nothing under /sys is writable. Each control shows the same path present
 * (and, where it is a file the supervisor made, non-empty) outside the sandbox.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "battery.h"

/* Absent, or an empty mask (a directory with no entries, a file with no bytes). */
static int absent_or_empty(const char *path, char *seen, size_t size) {
  struct stat st;
  if (stat(path, &st) != 0) return snprintf(seen, size, "%s: %s", path, errno_name(errno)), 1;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d == NULL) return snprintf(seen, size, "%s: opendir %s", path, errno_name(errno)), 1;
    int entries = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) entries++;
    closedir(d);
    snprintf(seen, size, "%s: directory with %d entries", path, entries);
    return entries == 0;
  }
  snprintf(seen, size, "%s: file of %lld bytes", path, (long long)st.st_size);
  return st.st_size == 0;
}

static int present(const char *path, char *seen, size_t size) {
  struct stat st;
  if (stat(path, &st) != 0) return snprintf(seen, size, "%s: %s", path, errno_name(errno)), 0;
  snprintf(seen, size, "%s present", path);
  return 1;
}

static void not_writable(const char *path, struct outcome *out) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd >= 0) {
    close(fd);
    return verdict(out, VERDICT_FAIL, "%s opened for writing", path);
  }
  verdict(out, VERDICT_PASS, "%s: %s", path, errno_name(errno));
}

static void present_control(const char *path, const char *key, struct outcome *out) {
  if (path == NULL) return verdict(out, VERDICT_SKIP, "no %s given", key);
  char seen[EVIDENCE_MAX];
  verdict(out, present(path, seen, sizeof seen) ? VERDICT_PASS : VERDICT_FAIL, "%s", seen);
}

static void host_write_attack(const struct battery_args *args, struct outcome *out) {
  if (args->write_target == NULL) return verdict(out, VERDICT_SKIP, "no write-target given");
  not_writable(args->write_target, out);
}

static void host_write_control(const struct battery_args *args, struct outcome *out) {
  present_control(args->write_target, "write-target", out);
}

static void hidden_attack(const struct battery_args *args, struct outcome *out) {
  if (args->hidden_count == 0) return verdict(out, VERDICT_SKIP, "no hidden path given");
  char seen[EVIDENCE_MAX] = "";
  for (size_t i = 0; i < args->hidden_count; i++)
    if (!absent_or_empty(args->hidden[i], seen, sizeof seen))
      return verdict(out, VERDICT_FAIL, "%s", seen);
  verdict(out, VERDICT_PASS, "%zu hidden paths absent or empty; last %s", args->hidden_count, seen);
}

static void hidden_control(const struct battery_args *args, struct outcome *out) {
  if (args->hidden_count == 0) return verdict(out, VERDICT_SKIP, "no hidden path given");
  char seen[EVIDENCE_MAX] = "";
  for (size_t i = 0; i < args->hidden_count; i++)
    if (absent_or_empty(args->hidden[i], seen, sizeof seen))
      return verdict(out, VERDICT_FAIL, "%s outside", seen);
  verdict(out, VERDICT_PASS, "%zu hidden paths present with content outside", args->hidden_count);
}

static void private_attack(const char *path, const char *key, struct outcome *out) {
  if (path == NULL) return verdict(out, VERDICT_SKIP, "no %s given", key);
  char seen[EVIDENCE_MAX];
  verdict(out, present(path, seen, sizeof seen) ? VERDICT_FAIL : VERDICT_PASS, "%s", seen);
}

static void tmp_attack(const struct battery_args *args, struct outcome *out) {
  private_attack(args->host_tmp, "host-tmp", out);
}
static void tmp_control(const struct battery_args *args, struct outcome *out) {
  present_control(args->host_tmp, "host-tmp", out);
}
static void shm_attack(const struct battery_args *args, struct outcome *out) {
  private_attack(args->host_shm, "host-shm", out);
}
static void shm_control(const struct battery_args *args, struct outcome *out) {
  present_control(args->host_shm, "host-shm", out);
}

/* The /proc mount's super options carry hidepid=invisible (or its number 2). */
static void hidepid_attack(const struct battery_args *args, struct outcome *out) {
  (void)args;
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (f == NULL) return verdict(out, VERDICT_FAIL, "mountinfo: %s", errno_name(errno));
  char line[1024];
  int found = 0;
  while (!found && fgets(line, sizeof line, f) != NULL)
    if (strstr(line, " /proc ") != NULL && strstr(line, " - proc ") != NULL)
      found = strstr(line, "hidepid=invisible") != NULL || strstr(line, "hidepid=2") != NULL;
  fclose(f);
  verdict(out, found ? VERDICT_PASS : VERDICT_FAIL, "/proc %s hidepid",
          found ? "mounted with" : "without");
}

static void hidepid_control(const struct battery_args *args, struct outcome *out) {
  (void)args;
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (f == NULL) return verdict(out, VERDICT_FAIL, "mountinfo: %s", errno_name(errno));
  fclose(f);
  verdict(out, VERDICT_PASS, "mountinfo readable outside");
}

static void protected_attack(const struct battery_args *args, struct outcome *out) {
  if (args->protected_path == NULL || args->protected_mode == NULL)
    return verdict(out, VERDICT_SKIP, "no protected and protected-mode given");
  if (strcmp(args->protected_mode, "read_only") == 0)
    return not_writable(args->protected_path, out);
  char seen[EVIDENCE_MAX];
  int masked = absent_or_empty(args->protected_path, seen, sizeof seen);
  verdict(out, masked ? VERDICT_PASS : VERDICT_FAIL, "%s", seen);
}

static void protected_control(const struct battery_args *args, struct outcome *out) {
  if (args->protected_path == NULL) return verdict(out, VERDICT_SKIP, "no protected given");
  char seen[EVIDENCE_MAX];
  if (strcmp(args->protected_mode ? args->protected_mode : "", "read_only") == 0)
    return verdict(out,
                   present(args->protected_path, seen, sizeof seen) ? VERDICT_PASS : VERDICT_FAIL,
                   "%s", seen);
  int empty = absent_or_empty(args->protected_path, seen, sizeof seen);
  verdict(out, empty ? VERDICT_FAIL : VERDICT_PASS, "%s outside", seen);
}

/* Every file a host root could write under /sys that a turn might aim at. */
static const char *const sys_targets[] = {
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/fs/cgroup/cgroup.procs",
    "/sys/class/net/lo/mtu",
    NULL,
};

static void sys_attack(const struct battery_args *args, struct outcome *out) {
  (void)args;
  for (size_t i = 0; sys_targets[i] != NULL; i++) {
    int fd = open(sys_targets[i], O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      close(fd);
      return verdict(out, VERDICT_FAIL, "%s opened for writing", sys_targets[i]);
    }
  }
  verdict(out, VERDICT_PASS, "no /sys target opens for writing");
}

static void sys_control(const struct battery_args *args, struct outcome *out) {
  (void)args;
  char seen[EVIDENCE_MAX];
  verdict(out, present("/sys/class/net/lo/mtu", seen, sizeof seen) ? VERDICT_PASS : VERDICT_FAIL,
          "%s", seen);
}

const struct battery_case view_cases[] = {
    {"view.host_write", host_write_attack, host_write_control, 0},
    {"view.hidden_state", hidden_attack, hidden_control, 0},
    {"view.tmp_private", tmp_attack, tmp_control, 0},
    {"view.shm_private", shm_attack, shm_control, 0},
    {"view.hidepid", hidepid_attack, hidepid_control, 0},
    {"view.protected", protected_attack, protected_control, 0},
    {"view.sys_read_only", sys_attack, sys_control, 0},
    {NULL, NULL, NULL, 0},
};
