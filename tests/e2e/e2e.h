/*
 * e2e.h - what the end-to-end Check programs share: a real carmyd per test
 * (cleaned up even when an assertion fails), calls built from C strings,
 * client processes that reserve and then die in a chosen way, and waits on
 * events with deadlines.
 *
 * Every helper that asserts does so with ck_assert, so it may only be used
 * in the test process itself, never in a forked worker: a worker reports
 * through a pipe or shared memory and leaves with _exit().
 */
#ifndef CARMY_TESTS_E2E_H
#define CARMY_TESTS_E2E_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <check.h>

#include "carmy.h"
#include "shm/shm.h"
#include "tests/harness.h"

/* A call with the default tool "tool", no args and no meta. */
#define E2E_CALL(p, s, r)                                                   \
	((struct carmy_call){ .principal = (p), .principal_len = strlen(p), \
			      .session = (s), .session_len = strlen(s),     \
			      .request_id = (r), .request_id_len = strlen(r), \
			      .tool = "tool", .tool_len = 4 })

/* A byte array literal as a (pointer, length) pair. */
#define E2E_BYTES(...) ((const uint8_t[]){ __VA_ARGS__ }), \
		       sizeof((const uint8_t[]){ __VA_ARGS__ })

/* ------------------------------------------------------------ carmyd */

/* Every test case that starts carmyd must call this once: it makes the
 * Check runner kill and clean up any carmyd a failed or timed-out test left
 * behind (after the test case's last test). */
void e2e_guard(TCase *tc);

/* Start carmyd with extra options (NULL-terminated, may be NULL); assert
 * that it came up. */
void e2e_start(struct carmyd_proc *d, const char *const *extra);

/* Stop it with SIGTERM, assert it exits 0 (so it was alive until now), and
 * remove what it leaves behind. Safe after e2e_kill9(). */
void e2e_stop(struct carmyd_proc *d);

/* kill -9 carmyd (the segment stays), and start it again on the same
 * socket and segment. */
void e2e_kill9(struct carmyd_proc *d);
void e2e_restart(struct carmyd_proc *d, const char *const *extra);

/* kill(pid, SIGSTOP), and wait (up to 20 s) until every thread of it has
 * stopped: the signal reaches a process's threads after kill() returns. */
void e2e_sigstop(pid_t pid);

/* Is carmyd still running (not exited, not a zombie)? */
bool e2e_alive(const struct carmyd_proc *d);

/* Connect, asserting success. */
carmy_t *e2e_connect(const struct carmyd_proc *d);

/* Is carmyd (d, running) or this test program built with a sanitiser, or is
 * $CARMY_SANITISED set (to anything but "" or "0")? Either runs several
 * times slower: heavy tests take a smaller sample then. carmyd is judged by
 * the sanitiser runtime it has mapped (a shared libasan or libtsan); a
 * runtime linked in statically is told by $CARMY_SANITISED. */
bool e2e_sanitised(const struct carmyd_proc *d);

/* Post p in slot (generation gen) for the loop ringing bell, as a client
 * that found that loop awake: set the bell to awake and shm_post(). A loop
 * may go to sleep between the two, and shm_post() then takes the post back
 * (SHM_WITHDRAWN), as it must; the bell is set again and the post retried
 * until it stands (SHM_POSTED), asserted within HARNESS_WAIT_MS. */
void e2e_post_awake(const struct shm_view *v, uint32_t slot, uint32_t bell,
		    uint32_t gen, const struct shm_post *p);

/* ------------------------------------------------------------ checks */

/* Does id match ^exec_[0-9a-f]{32}$ ? */
bool e2e_exec_id_valid(const char *id);

/* Decode an execution id's 32 hex digits into 16 bytes. */
void e2e_exec_bytes(const char *id, uint8_t out[SHM_EXEC_LEN]);

/* The state execution id exec is published in, in the segment v maps
 * (read-only will do): SHM_RUNNING, SHM_COMPLETED or SHM_UNCERTAIN, or
 * SHM_FREE if the table does not hold it. */
unsigned e2e_exec_state(const struct shm_view *v, const char *exec);

/* Wait until none of the n executions in exec is in v's table (forgotten
 * by a purge or retention); false if some still are after timeout_ms. */
bool e2e_await_gone(const struct shm_view *v, const char *const *exec,
		    int n, int timeout_ms);

/* Print one TAP diagnostic line ("# ..."), flushed at once. */
void e2e_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * A latency Carmy promises, ms against limit_ms, for what: always noted;
 * asserted only when CARMY_TIMING=1 (make check-timing). The default suite
 * runs on machines busy with other work, where a bound on time says more
 * about the machine than about carmyd; what it asserts there is that the
 * event happened at all.
 */
void e2e_within(double ms, double limit_ms, const char *what);

/* Milliseconds since t0_ns (harness_now_ns()). */
double e2e_ms_since(uint64_t t0_ns);

/* A process's CPU time so far (user + system), in clock ticks. */
unsigned long long e2e_cpu_ticks(pid_t pid);

/*
 * Call carmy_begin until it returns want_rc with r->state == want_state
 * (want_state < 0: any), CARMY_RESERVED (never awaited: a second execution
 * is what the callers test against), or timeout_ms passes. Returns the last
 * code; *seen_ns (may be NULL) gets harness_now_ns() of the last attempt.
 * Polls with a short bounded back-off: begin is a shared-memory read.
 */
int e2e_poll_begin(carmy_t *c, const struct carmy_call *call,
		   struct carmy_reservation *r, int want_rc, int want_state,
		   int timeout_ms, uint64_t *seen_ns);

/* Remove path and everything under it, as far as this user may; what is
 * gone already is no error, and symbolic links are removed, never
 * followed. */
void e2e_rm_rf(const char *path);

/* How many lines of the log at path contain what? Asserts it exists. */
int e2e_logged(const char *path, const char *what);

/* Wait until the log at path has more than n lines containing what; false
 * if it has not within ms. carmyd writes a line after the deed it tells
 * of, so a test waits on the line rather than reading the log once. */
bool e2e_await_logged(const char *path, const char *what, int n, int ms);

/* Read exactly n bytes within timeout_ms. Returns 0, or -1 on timeout, EOF
 * or error. */
int e2e_read_full(int fd, void *buf, size_t n, int timeout_ms);

/* A RELEASE of exec at entry sent by hand on a connection of its own to
 * carmyd at path, after a HELLO as a new owner: carmyd's answer code. */
int e2e_raw_release(const char *path, uint32_t entry,
		    const uint8_t exec[SHM_EXEC_LEN]);

/* Run carmyctl --socket d->socket with args (NULL-terminated, at most 12),
 * as uid, gid and the n groups when uid is not (uid_t)-1 (a forked child
 * becomes them: root only), trusting carmyd's uid. Returns its exit
 * status, with its standard error in err (errsz bytes, NUL-terminated);
 * asserts it ran and ended. */
int e2e_carmyctl(const struct carmyd_proc *d, uid_t uid, gid_t gid,
		 const gid_t *groups, size_t n, char *err, size_t errsz,
		 const char *const *args);

/* ------------------------------------------------------------ clients */

/* How a reserving child process leaves its reservation. */
enum e2e_end {
	E2E_HOLD,	/* keeps it until killed (or the parent closes to_child) */
	E2E_CLOSE,	/* carmy_close() without completing, then waits */
	E2E_EXIT,	/* exit(0) without completing or closing */
};

struct e2e_child {
	pid_t pid;
	int to_child;		/* closing it lets a waiting child exit */
	int from_child;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	uint64_t end_ns;	/* E2E_CLOSE/E2E_EXIT: when the child let go */
};

/* Fork a child that connects on its own, reserves call (it must get
 * CARMY_RESERVED) and reports its execution id; then, for E2E_CLOSE and
 * E2E_EXIT, lets go as told and reports when. Asserts all that happened. */
void e2e_child_reserve(struct e2e_child *ch, const char *socket,
		       const struct carmy_call *call, enum e2e_end end);

/* SIGKILL (if still running) and reap the child; close its pipes. */
void e2e_child_reap(struct e2e_child *ch);

#endif
