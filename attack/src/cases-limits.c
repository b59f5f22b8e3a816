/*
 * Limits: the small `pids`, `memory` and `tmp_size` the supervisor sets for the attack turn are
 * hit, not exceeded. Controls: the same amount, one step past the limit, succeeds outside.
 * The memory case runs in a child the cgroup's OOM group kill may take the whole turn with; it
 * runs last (main.c) and the supervisor reads a turn killed for memory after its "pending" line
 * as held.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "battery.h"

#define MIB (1024L * 1024L)

/* Forks up to `wanted` children that wait on a pipe; returns how many forks succeeded. */
static long fork_many(long wanted, int *err) {
  int fds[2];
  *err = 0;
  if (pipe(fds) != 0) return *err = errno, 0;
  pid_t *children = calloc((size_t)wanted, sizeof *children);
  long made = 0;
  while (children != NULL && made < wanted) {
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      char byte;
      _exit(read(fds[0], &byte, 1) < 0);
    }
    if (pid < 0) {
      *err = errno;
      break;
    }
    children[made++] = pid;
  }
  close(fds[0]);
  close(fds[1]);
  for (long i = 0; i < made; i++)
    waitpid(children[i], NULL, 0);
  free(children);
  return made;
}

static void pids_attack(const struct battery_args *args, struct outcome *out) {
  if (args->pids <= 0) return verdict(out, VERDICT_SKIP, "no pids given");
  int err;
  long made = fork_many(args->pids, &err);
  /* The battery itself counts: `pids` more children would put the group past its limit. */
  verdict(out, made < args->pids ? VERDICT_PASS : VERDICT_FAIL, "%ld of %ld forks (limit %ld)%s%s",
          made, args->pids, args->pids, err ? ": " : "", err ? errno_name(err) : "");
}

static void pids_control(const struct battery_args *args, struct outcome *out) {
  if (args->pids <= 0) return verdict(out, VERDICT_SKIP, "no pids given");
  int err;
  long made = fork_many(args->pids, &err);
  verdict(out, made == args->pids ? VERDICT_PASS : VERDICT_FAIL, "%ld of %ld forks outside%s%s",
          made, args->pids, err ? ": " : "", err ? errno_name(err) : "");
}

/* Touches `bytes` of fresh anonymous memory; 0 when all of it was touched. */
static int touch_memory(const void *arg) {
  long bytes = *(const long *)arg;
  char *block =
      mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) return errno;
  for (long i = 0; i < bytes; i += 4096)
    block[i] = 1;
  return 0;
}

static void memory_attack(const struct battery_args *args, struct outcome *out) {
  if (args->memory <= 0) return verdict(out, VERDICT_SKIP, "no memory given");
  long bytes = args->memory + 32 * MIB;
  struct child_result r = in_child(touch_memory, &bytes);
  int held = (r.signal == SIGKILL) || (r.exited && r.code == ENOMEM);
  verdict(out, held ? VERDICT_PASS : VERDICT_FAIL, "touching %ld bytes over a %ld limit: %s", bytes,
          args->memory, child_text(r));
}

static void memory_control(const struct battery_args *args, struct outcome *out) {
  if (args->memory <= 0) return verdict(out, VERDICT_SKIP, "no memory given");
  long bytes = args->memory + 32 * MIB;
  struct child_result r = in_child(touch_memory, &bytes);
  verdict(out, r.exited && r.code == 0 ? VERDICT_PASS : VERDICT_FAIL,
          "touching %ld bytes outside: %s", bytes, child_text(r));
}

/* Writes up to `limit` bytes into a new file at `path`; returns the bytes written, *err set
 * when a write failed. The file is removed. */
long fill_file(const char *path, long limit, int *err) {
  static char chunk[64 * 1024];
  memset(chunk, 'a', sizeof chunk);
  *err = 0;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return *err = errno, 0;
  long written = 0;
  while (written < limit) {
    ssize_t n = write(fd, chunk, sizeof chunk);
    if (n <= 0) {
      *err = n < 0 ? errno : ENOSPC;
      break;
    }
    written += n;
  }
  close(fd);
  unlink(path);
  return written;
}

static void tmp_size_attack(const struct battery_args *args, struct outcome *out) {
  if (args->tmp_size <= 0) return verdict(out, VERDICT_SKIP, "no tmp-size given");
  int err;
  long written = fill_file("/tmp/attack-battery-fill", args->tmp_size + MIB, &err);
  verdict(out, err != 0 && written <= args->tmp_size ? VERDICT_PASS : VERDICT_FAIL,
          "wrote %ld bytes into /tmp (limit %ld)%s%s", written, args->tmp_size, err ? ": " : "",
          err ? errno_name(err) : "");
}

static void tmp_size_control(const struct battery_args *args, struct outcome *out) {
  if (args->tmp_size <= 0 || args->tmp_dir == NULL)
    return verdict(out, VERDICT_SKIP, "no tmp-size and tmp-dir given");
  char path[512];
  snprintf(path, sizeof path, "%s/attack-battery-fill", args->tmp_dir);
  int err;
  long written = fill_file(path, args->tmp_size + MIB, &err);
  verdict(out, err == 0 ? VERDICT_PASS : VERDICT_FAIL, "wrote %ld bytes outside%s%s", written,
          err ? ": " : "", err ? errno_name(err) : "");
}

const struct battery_case limit_cases[] = {
    {"limits.pids", pids_attack, pids_control, 0},
    {"limits.tmp_size", tmp_size_attack, tmp_size_control, 0},
    {"limits.memory", memory_attack, memory_control, 1},
    {NULL, NULL, NULL, 0},
};
