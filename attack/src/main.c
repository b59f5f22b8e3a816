/*
 * attack-battery: attacks the turn boundary from inside a real turn, one case per protection,
 * and prints one JSON line per case. Modes:
 *   attack-battery attack KEY=VALUE...   inside the turn: {"case","result":"held|broken|skipped"}
 *   attack-battery control KEY=VALUE...  outside, as the supervisor's child: {"case","control":
 *                                        "ok|failed|skipped"}; a case whose control does not
 *                                        succeed is reported skipped by the supervisor
 *   attack-battery euid                  prints "RUID EUID CAPEFF" (the setuid case runs a
 *                                        setuid-root copy of this program in this mode)
 * The keys are the host facts the supervisor hands over (args.c). A case whose fact is absent is
 * skipped, naming the key. The case that can end the turn (memory, with the cgroup's OOM group
 * kill) runs last, announced by a "pending" line first, so no other case's line is lost.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "battery.h"

static const struct battery_case *const groups[] = {
    identity_cases, seccomp_cases, view_cases,      process_cases,
    network_cases,  limit_cases,   workspace_cases,
};

static const char *attack_word(enum verdict v) {
  return v == VERDICT_PASS ? "held" : v == VERDICT_FAIL ? "broken" : "skipped";
}

static const char *control_word(enum verdict v) {
  return v == VERDICT_PASS ? "ok" : v == VERDICT_FAIL ? "failed" : "skipped";
}

static void run_case(const struct battery_case *c, int control, const struct battery_args *args) {
  struct outcome out;
  memset(&out, 0, sizeof out);
  if (control) {
    c->control(args, &out);
    report_line(c->name, "control", control_word(out.verdict), out.evidence);
  } else {
    if (c->ends_turn) report_line(c->name, "result", "pending", "the attempt may end the turn");
    c->attack(args, &out);
    report_line(c->name, "result", attack_word(out.verdict), out.evidence);
  }
}

static void run_all(int control, const struct battery_args *args) {
  size_t n = sizeof groups / sizeof groups[0];
  for (int last_pass = 0; last_pass <= 1; last_pass++)
    for (size_t g = 0; g < n; g++)
      for (const struct battery_case *c = groups[g]; c->name != NULL; c++)
        if (c->ends_turn == last_pass) run_case(c, control, args);
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "euid") == 0) {
    char eff[64] = "unknown";
    (void)status_field("CapEff", eff, sizeof eff);
    printf("%ld %ld %s\n", (long)getuid(), (long)geteuid(), eff);
    return 0;
  }
  if (argc < 2 || (strcmp(argv[1], "attack") != 0 && strcmp(argv[1], "control") != 0)) {
    fputs("usage: attack-battery attack|control KEY=VALUE... | attack-battery euid\n", stderr);
    return 2;
  }
  struct battery_args args;
  char problem[256];
  if (parse_args(argc, argv, 2, &args, problem, sizeof problem) != 0) {
    fprintf(stderr, "attack-battery: %s\n", problem);
    return 2;
  }
  run_all(strcmp(argv[1], "control") == 0, &args);
  return 0;
}
