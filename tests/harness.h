/*
 * harness.h - start and stop a real carmyd for tests and tools, and wait on
 * events with deadlines (never sleep as synchronisation).
 */
#ifndef CARMY_TESTS_HARNESS_H
#define CARMY_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct carmyd_proc {
	pid_t pid;
	char dir[128];		/* private temp dir holding the socket */
	char socket[160];
	char segment[64];
};

/* Path of a program built in this tree ("daemon/carmyd",
 * "tools/carmy-run"), from $CARMY_BUILDDIR (set by make check) or ".". */
const char *harness_path(const char *rel, char *buf, size_t size);

/* Start carmyd --foreground --transient in a fresh temp dir with extra
 * options (NULL-terminated list, may be NULL), and wait up to 10 s for its
 * ready line. Returns 0 or -1. */
int harness_start(struct carmyd_proc *d, const char *const *extra);

/* Start again on the same socket and segment (after a kill). */
int harness_restart(struct carmyd_proc *d, const char *const *extra);

/* SIGTERM and wait for exit (10 s deadline, then SIGKILL). Returns the exit
 * status as waitpid reports it, or -1. Removes the temp dir. */
int harness_stop(struct carmyd_proc *d);

/* kill -9 and reap; the segment stays. */
void harness_kill9(struct carmyd_proc *d);

/* Monotonic time in nanoseconds. */
uint64_t harness_now_ns(void);

/* Wait for child pid to exit, up to timeout_ms. Returns its wait status, or
 * -1 on timeout (the child is left running). */
int harness_waitpid(pid_t pid, int timeout_ms);

#endif
