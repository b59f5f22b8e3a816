/* Live processes by real uid, read from /proc. */
#ifndef IDENTITY_HELPER_PROCS_H
#define IDENTITY_HELPER_PROCS_H

#include <stdbool.h>
#include <stdint.h>

/* The real uid of a live (not zombie) process `pid_name` (a /proc entry name); false when it is
 * gone, already dead or unreadable. */
bool procs_live_real_uid(const char *pid_name, uint32_t *uid);

/* True for the name of a /proc entry that is a process ([1-9][0-9]*). */
bool procs_is_pid_name(const char *name);

/* Whether any live process has real uid `uid`; a /proc that cannot be read counts as yes. */
bool procs_uid_has_live_process(uint32_t uid);

#endif
