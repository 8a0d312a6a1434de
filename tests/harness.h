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
	bool as_user;		/* harness_start_as: run as uid/gid */
	uid_t uid;
	gid_t gid;
};

/* Path of a program built in this tree ("daemon/carmyd",
 * "tools/carmy-run"), from $CARMY_BUILDDIR (set by make check) or ".". */
const char *harness_path(const char *rel, char *buf, size_t size);

/*
 * The deadline of a wait for an event that must come (carmyd ready or
 * gone, a child's report, a log line, a reply): it bounds a failure only,
 * so it is as long as a sanitised carmyd on a machine busy with other work
 * may need, never a measure of speed.
 */
#define HARNESS_WAIT_MS 60000

/* Start carmyd --foreground --transient in a fresh temp dir with extra
 * options (NULL-terminated list, may be NULL), and wait up to
 * HARNESS_WAIT_MS for its ready line. Returns 0 or -1. With
 * $CARMY_TEST_NOFILE set, carmyd starts with that descriptor limit (soft
 * and hard). */
int harness_start(struct carmyd_proc *d, const char *const *extra);

/* Start again on the same socket and segment (after a kill). */
int harness_restart(struct carmyd_proc *d, const char *const *extra);

/* SIGTERM and wait for exit (HARNESS_WAIT_MS, then SIGKILL). Returns the exit
 * status as waitpid reports it, or -1. Removes the temp dir. */
int harness_stop(struct carmyd_proc *d);

/* kill -9 and reap; the segment stays. */
void harness_kill9(struct carmyd_proc *d);

/*
 * Cross-user tests. A throwaway local user "carmy-test-TAG" with a group of
 * the same name (harness_user), or a group alone (harness_group), created
 * with useradd / groupadd the first time and kept for later runs. Only
 * root can create them: return 0 with the ids, or -1 when the caller is not
 * root or the tool failed; the test then skips and says so (a TAP "#"
 * note), since a check that cannot run must not pass as if it had.
 */
int harness_user(const char *tag, uid_t *uid, gid_t *gid);
int harness_group(const char *tag, gid_t *gid);

/* Become uid with primary group gid and exactly the n supplementary groups
 * in groups (may be NULL): in a forked child, before exec. 0 or -1. */
int harness_become(uid_t uid, gid_t gid, const gid_t *groups, size_t n);

/* Start carmyd as that user (its temp dir handed to it): like
 * harness_start, and harness_restart/stop work on it as usual. */
int harness_start_as(struct carmyd_proc *d, uid_t uid, gid_t gid,
		     const char *const *extra);

/* Monotonic time in nanoseconds. */
uint64_t harness_now_ns(void);

/* Wait for child pid to exit, up to timeout_ms. Returns its wait status, or
 * -1 on timeout (the child is left running). */
int harness_waitpid(pid_t pid, int timeout_ms);

#endif
