/* Identity: the command runs as a leased worker uid with no groups, no capabilities and
 * no_new_privs, and a setuid-root binary does not elevate it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "battery.h"

int status_field(const char *key, char *value, size_t size) {
  FILE *f = fopen("/proc/self/status", "re");
  if (f == NULL) return -1;
  char line[256];
  size_t key_len = strlen(key);
  int found = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, key, key_len) == 0 && line[key_len] == ':') {
      const char *v = line + key_len + 1;
      while (*v == ' ' || *v == '\t')
        v++;
      snprintf(value, size, "%s", v);
      value[strcspn(value, "\n")] = '\0';
      found = 0;
      break;
    }
  fclose(f);
  return found;
}

static void uid_attack(const struct battery_args *args, struct outcome *out) {
  uid_t r, e, s;
  if (getresuid(&r, &e, &s) != 0)
    return verdict(out, VERDICT_FAIL, "getresuid: %s", errno_name(errno));
  int same = r == e && e == s;
  /* Without an expected range, only "not root" can be asserted. */
  int expected = args->uid_first < 0
                     ? r != 0
                     : ((long)r >= args->uid_first && (long)r < args->uid_first + args->uid_count);
  verdict(out, same && expected ? VERDICT_PASS : VERDICT_FAIL, "uid=%ld,%ld,%ld range=%ld+%ld",
          (long)r, (long)e, (long)s, args->uid_first, args->uid_count);
}

static void uid_control(const struct battery_args *args, struct outcome *out) {
  (void)args;
  uid_t r, e, s;
  if (getresuid(&r, &e, &s) != 0)
    return verdict(out, VERDICT_FAIL, "getresuid: %s", errno_name(errno));
  verdict(out, VERDICT_PASS, "uid=%ld outside", (long)r);
}

static void groups_attack(const struct battery_args *args, struct outcome *out) {
  (void)args;
  int n = getgroups(0, NULL);
  verdict(out, n == 0 ? VERDICT_PASS : VERDICT_FAIL, "groups=%d", n);
}

static void groups_control(const struct battery_args *args, struct outcome *out) {
  (void)args;
  int n = getgroups(0, NULL);
  verdict(out, n >= 0 ? VERDICT_PASS : VERDICT_FAIL, "getgroups answers outside (%d)", n);
}

static void caps_attack(const struct battery_args *args, struct outcome *out) {
  (void)args;
  char eff[64], bnd[64];
  if (status_field("CapEff", eff, sizeof eff) != 0 || status_field("CapBnd", bnd, sizeof bnd) != 0)
    return verdict(out, VERDICT_FAIL, "no CapEff/CapBnd in /proc/self/status");
  int zero = strtoull(eff, NULL, 16) == 0 && strtoull(bnd, NULL, 16) == 0;
  verdict(out, zero ? VERDICT_PASS : VERDICT_FAIL, "CapEff=%s CapBnd=%s", eff, bnd);
}

static void caps_control(const struct battery_args *args, struct outcome *out) {
  (void)args;
  char bnd[64];
  if (status_field("CapBnd", bnd, sizeof bnd) != 0) return verdict(out, VERDICT_FAIL, "no CapBnd");
  verdict(out, strtoull(bnd, NULL, 16) != 0 ? VERDICT_PASS : VERDICT_FAIL, "CapBnd=%s outside",
          bnd);
}

static void nnp_attack(const struct battery_args *args, struct outcome *out) {
  (void)args;
  int v = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  verdict(out, v == 1 ? VERDICT_PASS : VERDICT_FAIL, "no_new_privs=%d", v);
}

static void nnp_control(const struct battery_args *args, struct outcome *out) {
  (void)args;
  int v = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  verdict(out, v == 0 ? VERDICT_PASS : VERDICT_FAIL, "no_new_privs=%d outside", v);
}

/* What the setuid copy ran as: its real and effective uid and CapEff. */
struct elevation {
  long ruid, euid;
  unsigned long long cap_eff;
};

/* Runs the setuid copy in "euid" mode; -1 with `problem` set when it did not run. */
static int run_setuid_copy(const char *probe, struct elevation *seen, char *problem, size_t size) {
  int fds[2];
  if (pipe(fds) != 0) return snprintf(problem, size, "pipe: %s", errno_name(errno)), -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execl(probe, probe, "euid", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char buf[96] = {0};
  ssize_t n = pid < 0 ? -1 : read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  char eff[64];
  if (n <= 0 || sscanf(buf, "%ld %ld %63s", &seen->ruid, &seen->euid, eff) != 3)
    return snprintf(problem, size, "the setuid copy did not run (status %d)", status), -1;
  seen->cap_eff = strtoull(eff, NULL, 16);
  return 0;
}

/* Held: the copy ran as the caller (no uid change) with no capability. */
static void setuid_attack(const struct battery_args *args, struct outcome *out) {
  if (args->setuid_probe == NULL) return verdict(out, VERDICT_SKIP, "no setuid-probe given");
  char problem[128] = "";
  struct elevation seen;
  if (run_setuid_copy(args->setuid_probe, &seen, problem, sizeof problem) != 0)
    return verdict(out, VERDICT_PASS, "%s", problem);
  int held = seen.euid == seen.ruid && seen.cap_eff == 0;
  verdict(out, held ? VERDICT_PASS : VERDICT_FAIL,
          "setuid-root copy ran with ruid=%ld euid=%ld CapEff=%llx", seen.ruid, seen.euid,
          seen.cap_eff);
}

/* The control: outside, the copy does elevate (euid 0 with capabilities). */
static void setuid_control(const struct battery_args *args, struct outcome *out) {
  if (args->setuid_probe == NULL) return verdict(out, VERDICT_SKIP, "no setuid-probe given");
  char problem[128] = "";
  struct elevation seen;
  if (run_setuid_copy(args->setuid_probe, &seen, problem, sizeof problem) != 0)
    return verdict(out, VERDICT_FAIL, "%s", problem);
  int elevated = seen.euid == 0 && seen.cap_eff != 0;
  verdict(out, elevated ? VERDICT_PASS : VERDICT_FAIL,
          "setuid-root copy ran with euid=%ld CapEff=%llx outside", seen.euid, seen.cap_eff);
}

const struct battery_case identity_cases[] = {
    {"identity.uid", uid_attack, uid_control, 0},
    {"identity.groups", groups_attack, groups_control, 0},
    {"identity.capabilities", caps_attack, caps_control, 0},
    {"identity.no_new_privs", nnp_attack, nnp_control, 0},
    {"identity.setuid", setuid_attack, setuid_control, 0},
    {NULL, NULL, NULL, 0},
};
