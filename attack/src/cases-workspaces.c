/*
 * Workspaces: another workspace's files are unreachable from this one, and the workspace byte
 * cap is enforced where the host can enforce it (the supervisor passes workspace-cap only then;
 * without it the case is skipped, naming the requirement).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "battery.h"

#define MIB (1024L * 1024L)

long fill_file(const char *path, long limit, int *err);

static void other_attack(const struct battery_args *args, struct outcome *out) {
  if (args->other_workspace == NULL) return verdict(out, VERDICT_SKIP, "no other-workspace given");
  int fd = open(args->other_workspace, O_RDONLY | O_CLOEXEC);
  int err = errno;
  if (fd >= 0) {
    char byte;
    ssize_t n = read(fd, &byte, 1);
    close(fd);
    return verdict(out, n > 0 ? VERDICT_FAIL : VERDICT_PASS, "%s: opened, %s",
                   args->other_workspace, n > 0 ? "content read" : "empty");
  }
  verdict(out, VERDICT_PASS, "%s: %s", args->other_workspace, errno_name(err));
}

static void other_control(const struct battery_args *args, struct outcome *out) {
  if (args->other_workspace == NULL) return verdict(out, VERDICT_SKIP, "no other-workspace given");
  int fd = open(args->other_workspace, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return verdict(out, VERDICT_FAIL, "%s outside: %s", args->other_workspace, errno_name(errno));
  char byte;
  ssize_t n = read(fd, &byte, 1);
  close(fd);
  verdict(out, n > 0 ? VERDICT_PASS : VERDICT_FAIL, "%s readable outside", args->other_workspace);
}

static void cap_attack(const struct battery_args *args, struct outcome *out) {
  if (args->workspace_cap <= 0)
    return verdict(out, VERDICT_SKIP,
                   "no workspace-cap given: the host enforces no workspace byte cap");
  int err;
  long written = fill_file("attack-battery-fill", args->workspace_cap + MIB, &err);
  verdict(out, err != 0 && written <= args->workspace_cap ? VERDICT_PASS : VERDICT_FAIL,
          "wrote %ld bytes into the workspace (cap %ld)%s%s", written, args->workspace_cap,
          err ? ": " : "", err ? errno_name(err) : "");
}

static void cap_control(const struct battery_args *args, struct outcome *out) {
  if (args->workspace_cap <= 0 || args->tmp_dir == NULL)
    return verdict(out, VERDICT_SKIP, "no workspace-cap and tmp-dir given");
  char path[512];
  snprintf(path, sizeof path, "%s/attack-battery-cap", args->tmp_dir);
  int err;
  long written = fill_file(path, args->workspace_cap + MIB, &err);
  verdict(out, err == 0 ? VERDICT_PASS : VERDICT_FAIL, "wrote %ld bytes outside%s%s", written,
          err ? ": " : "", err ? errno_name(err) : "");
}

const struct battery_case workspace_cases[] = {
    {"workspaces.other_workspace", other_attack, other_control, 0},
    {"workspaces.byte_cap", cap_attack, cap_control, 0},
    {NULL, NULL, NULL, 0},
};
