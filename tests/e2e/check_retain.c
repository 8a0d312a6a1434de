/*
 * check_retain.c - carmyd's watch over the table's room: retention
 * (--retain AGE forgets completed executions that finished more than AGE
 * ago, and never a running or interrupted one, while clients race it), a
 * journal that keeps what retention forgot forgotten across a reboot, bad
 * --retain values refused by name, an operator's forget of one execution,
 * and the capacity warnings (past 80% and 95%, once per crossing, and the
 * first refusal with its advice).
 *
 * Every wait is for an event: an entry gone from the table, a line in
 * carmyd's log (which it writes after the deed), a child's report. Only
 * the checks that a completion younger than AGE still replays depend on
 * the clock: each is asserted when the replay was asked for (or carmyd
 * killed) before AGE had passed since the entry finished, as carmyd's
 * clock tells, and noted otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

#define SHORT_AGE "2s"
#define OLD 5
#define SHORT_AGE_NS 2000000000ull

static struct carmyd_proc d;
static carmy_t *c;
static char tmpdir[64], logpath[96], spec[128];

static void setup(void)
{
	memset(&d, 0, sizeof(d));
	c = NULL;
	strcpy(tmpdir, "/tmp/carmy-retain.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(logpath, sizeof(logpath), "%s/carmyd.log", tmpdir);
	snprintf(spec, sizeof(spec), "journal:%s/j", tmpdir);
}

static void teardown(void)
{
	carmy_close(c);
	c = NULL;
	if (d.socket[0] != '\0')
		e2e_stop(&d);
	e2e_rm_rf(tmpdir);
}

/* carmyd with --retain retain, --capacity capacity, its log (at debug
 * level: each retention pass says so) in logpath, and the journal store
 * if journal. */
static void start(const char *retain, const char *capacity, bool journal)
{
	const char *opts[] = { "--retain", retain, "--capacity", capacity,
			       "--max-result", "256", "--grace", "0",
			       "--log-level", "debug", "--log-file", logpath,
			       journal ? "--store" : NULL, spec, NULL };

	e2e_start(&d, opts);
	c = e2e_connect(&d);
}

static int logged(const char *what)
{
	return e2e_logged(logpath, what);
}

/* Wait until the log has n lines with what in all. */
static void await_lines(const char *what, int n)
{
	ck_assert_msg(e2e_await_logged(logpath, what, n - 1, HARNESS_WAIT_MS),
		      "the log never had %d line(s) with '%s' (it has %d)", n,
		      what, logged(what));
}

/* Wait until k more retention passes have run than had when called. */
static void await_passes(int k)
{
	await_lines("retention pass:", logged("retention pass:") + k);
}

static int begin(carmy_t *h, const char *rid, struct carmy_reservation *r)
{
	struct carmy_call call = E2E_CALL("p", "s", rid);

	return carmy_begin(h, &call, r);
}

/* A new call, run and completed with result rid: its execution id. */
static void run(carmy_t *h, const char *rid, char exec[CARMY_EXECUTION_ID_LEN + 1])
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	ck_assert_int_eq(begin(h, rid, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(h, &r, CARMY_STATUS_COMPLETED, rid,
					strlen(rid)), 0);
	carmy_reservation_clear(&r);
}

/* When exec finished, by carmyd's clock (CLOCK_REALTIME ns). */
static uint64_t finished_of(const struct shm_view *v, const char *exec)
{
	uint8_t want[SHM_EXEC_LEN];

	e2e_exec_bytes(exec, want);
	for (uint32_t e = 0; e < v->geo.capacity; e++)
		if (shm_state_as(v, e, want) == SHM_COMPLETED)
			return __atomic_load_n(&shm_entry_at(v, e)->en_finished_ns,
					       __ATOMIC_ACQUIRE);
	ck_abort_msg("%s is not completed in the table", exec);
	return 0;
}

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Wait until none of the n executions is in the table. */
static void await_gone(const struct shm_view *v,
		       char (*exec)[CARMY_EXECUTION_ID_LEN + 1], int n)
{
	const char *ids[OLD];

	ck_assert_int_le(n, OLD);
	for (int i = 0; i < n; i++)
		ids[i] = exec[i];
	ck_assert_msg(e2e_await_gone(v, ids, n, HARNESS_WAIT_MS),
		      "completed entries were never forgotten");
}

/*
 * A call completed just now must replay: asserted when the replay was
 * asked for before age_ns had passed since it finished, by carmyd's
 * clock. Past that, retention may have forgotten it, rightly.
 */
static void expect_fresh_replays(carmy_t *h, const struct shm_view *v,
				 const char *rid, uint64_t age_ns)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	uint64_t finished, asked;
	int rc;

	run(h, rid, exec);
	finished = finished_of(v, exec);
	asked = real_ns();
	rc = begin(h, rid, &r);
	if (asked < finished + age_ns) {
		ck_assert_msg(rc == CARMY_REPLAY, "%s, %.3f s old: %s", rid,
			      (double)(asked - finished) / 1e9,
			      carmy_errname(rc));
		ck_assert_str_eq(r.execution_id, exec);
	} else {
		e2e_note("%s: asked %.3f s after it finished, past the age: "
			 "not judged", rid, (double)(asked - finished) / 1e9);
	}
	if (rc == CARMY_RESERVED)
		ck_assert_int_eq(carmy_release(h, &r), 0);
	carmy_reservation_clear(&r);
}

/* A process reserves rid, and is killed: rid's entry is interrupted.
 * Returns with its execution id in exec. */
static void interrupt(const char *rid, char exec[CARMY_EXECUTION_ID_LEN + 1])
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", rid);
	struct e2e_child ch;

	e2e_child_reserve(&ch, d.socket, &call, E2E_HOLD);
	strcpy(exec, ch.exec);
	e2e_child_reap(&ch);
	ck_assert_int_eq(e2e_poll_begin(c, &call, &r, CARMY_EUNCERTAIN,
					CARMY_STATE_INTERRUPTED,
					HARNESS_WAIT_MS, NULL),
			 CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_INTERRUPTED);
	carmy_reservation_clear(&r);
}

static void expect_uncertain(carmy_t *h, const char *rid, int state,
			     const char *exec)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	ck_assert_int_eq(begin(h, rid, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, state);
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
}

/* rid is forgotten: a call with it is new, and runs (released here). */
static void expect_new(carmy_t *h, const char *rid, const char *old_exec)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	ck_assert_msg(begin(h, rid, &r) == CARMY_RESERVED, "%s is not new",
		      rid);
	ck_assert_str_ne(r.execution_id, old_exec);
	ck_assert_int_eq(carmy_release(h, &r), 0);
	carmy_reservation_clear(&r);
}

/* ------------------------------------------------------------ retention */

START_TEST(test_only_completed_entries_past_the_age_are_forgotten)
{
	char old[OLD][CARMY_EXECUTION_ID_LEN + 1], lost[CARMY_EXECUTION_ID_LEN + 1];
	struct carmy_reservation held = CARMY_RESERVATION_INIT;
	struct shm_view v;
	carmy_t *c2;
	char rid[24];

	start(SHORT_AGE, "64", false);
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	ck_assert_uint_eq(shm_header(&v)->sh_retain_ms, 2000);
	for (int i = 0; i < OLD; i++) {
		snprintf(rid, sizeof(rid), "old-%d", i);
		run(c, rid, old[i]);
	}
	ck_assert_int_eq(begin(c, "held", &held), CARMY_RESERVED);
	interrupt("lost", lost);

	await_gone(&v, old, OLD);
	await_lines("retention forgot", 1);
	ck_assert_int_ge(logged("older than 2s"), 1);
	/* Passes go on; the running and the interrupted stay, as they
	 * were. */
	await_passes(2);
	ck_assert_uint_eq(e2e_exec_state(&v, held.execution_id), SHM_RUNNING);
	ck_assert_uint_eq(e2e_exec_state(&v, lost), SHM_UNCERTAIN);
	c2 = e2e_connect(&d);
	expect_uncertain(c2, "held", CARMY_STATE_RUNNING, held.execution_id);
	expect_uncertain(c2, "lost", CARMY_STATE_INTERRUPTED, lost);
	/* Still ours: its result is recorded and replays. */
	ck_assert_int_eq(carmy_complete(c, &held, CARMY_STATUS_COMPLETED, "h",
					1), 0);
	expect_fresh_replays(c2, &v, "fresh", SHORT_AGE_NS);
	for (int i = 0; i < OLD; i++) {
		snprintf(rid, sizeof(rid), "old-%d", i);
		expect_new(c2, rid, old[i]);
	}
	carmy_reservation_clear(&held);
	carmy_close(c2);
	shm_unmap(&v);
}
END_TEST

/* --retain never (or 0) keeps everything: passes never run. */
START_TEST(test_never_keeps_every_completed_entry)
{
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct shm_view v;

	start("never", "64", false);
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	ck_assert_uint_eq(shm_header(&v)->sh_retain_ms, SHM_RETAIN_NEVER);
	run(c, "kept", exec);
	ck_assert_int_ge(logged("retain never"), 1);
	/* The capacity watch runs every second, retention never: wait
	 * for a line the watch writes (a refusal's advice) to know time
	 * has passed under carmyd's eyes. */
	for (int i = 0; i < 63; i++) {
		char rid[24], x[CARMY_EXECUTION_ID_LEN + 1];

		snprintf(rid, sizeof(rid), "fill-%d", i);
		run(c, rid, x);
	}
	ck_assert_int_eq(begin(c, "one-more", &r), CARMY_ECAPACITY);
	await_lines("refused: the table is full", 1);
	await_lines("past 95%", 1);
	ck_assert_int_eq(logged("retention pass:"), 0);
	ck_assert_int_eq(begin(c, "kept", &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
	shm_unmap(&v);
}
END_TEST

/* carmyd --retain value: it must refuse to start (exit 64), saying why
 * and naming the option. */
static void expect_refused(const char *value)
{
	char path[256], err[1024];
	ssize_t got, have = 0;
	int p[2], st;
	pid_t pid;

	harness_path("daemon/carmyd", path, sizeof(path));
	ck_assert_int_eq(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(p[1], STDERR_FILENO);
		execl(path, path, "--foreground", "--socket", "/nonexistent/s",
		      "--retain", value, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	while (have < (ssize_t)sizeof(err) - 1 &&
	       (got = read(p[0], err + have, sizeof(err) - 1 - (size_t)have)) > 0)
		have += got;
	err[have] = '\0';
	close(p[0]);
	st = harness_waitpid(pid, HARNESS_WAIT_MS);
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 64,
		      "carmyd --retain '%s': wanted exit status 64", value);
	ck_assert_msg(strstr(err, "carmyd: --retain: expected an age") != NULL,
		      "carmyd --retain '%s' said: %s", value, err);
}

START_TEST(test_bad_retain_values_are_refused_by_name)
{
	static const char *const bad[] = { "", "soon", "-1s", "1.5h", "24 h",
					   "1y", "Never", "99999999999d" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_refused(bad[i]);
}
END_TEST

/* ------------------------------------------------------------ racing */

#define WORKERS 4
#define HELD_MAX 64

/* How a worker reports a failure: exit code and a line on stderr. */
static void worker_fail(int code, const char *what, const char *rid, int rc)
{
	fprintf(stderr, "worker %d: %s %s: %s\n", (int)getpid(), what, rid,
		carmy_errname(rc));
	_exit(code);
}

/* Has the parent written to fd? */
static bool told(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/*
 * Worker id's retry of an earlier call rid (held: the index in held of
 * the one running under it, or -1). A held one must be running as it was;
 * any other replays, or runs anew if it was forgotten (or never ran: the
 * table was full then).
 */
static void retry(carmy_t *w, const char *rid,
		  const struct carmy_reservation *held)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	int rc = begin(w, rid, &r);

	if (held != NULL) {
		if (rc != CARMY_EUNCERTAIN || r.state != CARMY_STATE_RUNNING ||
		    strcmp(r.execution_id, held->execution_id) != 0)
			worker_fail(13, "retry of held", rid, rc);
	} else if (rc == CARMY_RESERVED) {
		rc = carmy_complete(w, &r, CARMY_STATUS_COMPLETED, rid,
				    strlen(rid));
	} else if (rc == CARMY_REPLAY || rc == CARMY_ECAPACITY) {
		rc = 0;
	}
	if (held == NULL && rc != 0)
		worker_fail(14, "retry", rid, rc);
	carmy_reservation_clear(&r);
}

/*
 * A client process racing retention (and the test's purges) until the
 * parent says stop ('S'): new calls, every eighth held running to the end
 * (the first HELD_MAX), the others completed, and after each a retry of an
 * earlier one (retry()). A new call may find the table full, which is no
 * failure. Once the parent says go ('G', after more retention passes),
 * every held one must still be running as it was, and complete.
 */
static void worker_main(int id, int go_fd, int done_fd)
{
	struct carmy_reservation held[HELD_MAX], r = CARMY_RESERVATION_INIT;
	int held_at[HELD_MAX];	/* the call each runs under */
	char rid[32];
	int nheld = 0, rc;
	carmy_t *w;
	char byte;

	srand((unsigned)getpid());
	if (carmy_connect(&w, d.socket) != 0)
		_exit(10);
	for (int i = 0; !told(go_fd); i++) {
		const struct carmy_reservation *h = NULL;
		int j;

		snprintf(rid, sizeof(rid), "w%d-%d", id, i);
		rc = begin(w, rid, &r);
		if (rc == CARMY_RESERVED && i % 8 == 0 && nheld < HELD_MAX) {
			held_at[nheld] = i;
			held[nheld++] = r;
			r = (struct carmy_reservation)CARMY_RESERVATION_INIT;
		} else if (rc == CARMY_RESERVED) {
			rc = carmy_complete(w, &r, CARMY_STATUS_COMPLETED, rid,
					    strlen(rid));
			if (rc != 0)
				worker_fail(12, "complete", rid, rc);
		} else if (rc != CARMY_ECAPACITY) {
			worker_fail(11, "new", rid, rc);
		}
		if (i == 0)
			continue;
		j = rand() % i;
		for (int k = 0; k < nheld; k++)
			if (held_at[k] == j)
				h = &held[k];
		snprintf(rid, sizeof(rid), "w%d-%d", id, j);
		retry(w, rid, h);
	}
	if (read(go_fd, &byte, 1) != 1 || write(done_fd, "L", 1) != 1 ||
	    read(go_fd, &byte, 1) != 1)
		_exit(15);
	for (int k = 0; k < nheld; k++) {
		snprintf(rid, sizeof(rid), "w%d-%d", id, held_at[k]);
		retry(w, rid, &held[k]);
		rc = carmy_complete(w, &held[k], CARMY_STATUS_COMPLETED, "h", 1);
		if (rc != 0)
			worker_fail(17, "held complete", rid, rc);
	}
	carmy_close(w);
	_exit(0);
}

/* carmyctl purge --older-than age against d: its exit status. */
static int purge(const char *age)
{
	const char *const args[] = { "purge", "--older-than", age, NULL };
	char err[1024];

	return e2e_carmyctl(&d, (uid_t)-1, 0, NULL, 0, err, sizeof(err), args);
}

/* Tell every worker byte b. */
static void tell(int go[WORKERS][2], const char *b)
{
	for (int i = 0; i < WORKERS; i++)
		ck_assert_int_eq(write(go[i][1], b, 1), 1);
}

START_TEST(test_retention_races_clients_and_purges)
{
	int go[WORKERS][2], done[WORKERS][2], forgot;
	char lost[CARMY_EXECUTION_ID_LEN + 1];
	char late[OLD][CARMY_EXECUTION_ID_LEN + 1];
	struct shm_view v;
	pid_t pid[WORKERS];

	start("200ms", "16384", false);
	interrupt("lost", lost);
	forgot = logged("retention forgot");
	for (int i = 0; i < WORKERS; i++) {
		ck_assert_int_eq(pipe(go[i]), 0);
		ck_assert_int_eq(pipe(done[i]), 0);
		fflush(NULL);
		pid[i] = fork();
		ck_assert_int_ge(pid[i], 0);
		if (pid[i] == 0)
			worker_main(i, go[i][0], done[i][1]);
		close(go[i][0]);
		close(done[i][1]);
	}
	/* An operator purges meanwhile, and retention forgets twice. */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(purge("100ms"), 0);
	await_lines("retention forgot", forgot + 2);
	tell(go, "S");
	e2e_note("retention passes that forgot entries while the workers "
		 "ran: %d", logged("retention forgot") - forgot);
	for (int i = 0; i < WORKERS; i++) {
		char byte;

		ck_assert_msg(e2e_read_full(done[i][0], &byte, 1,
					    HARNESS_WAIT_MS) == 0,
			      "worker %d failed or stalled", i);
	}
	/* Calls no purge reaches: retention forgets them too. */
	for (int i = 0; i < OLD; i++) {
		char rid[24];

		snprintf(rid, sizeof(rid), "late-%d", i);
		run(c, rid, late[i]);
	}
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	await_gone(&v, late, OLD);
	shm_unmap(&v);
	/* Two more passes with every held call still running, then each
	 * worker checks its own. */
	await_passes(2);
	expect_uncertain(c, "lost", CARMY_STATE_INTERRUPTED, lost);
	tell(go, "G");
	for (int i = 0; i < WORKERS; i++) {
		int st = harness_waitpid(pid[i], HARNESS_WAIT_MS);

		ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "worker %d: wait status %#x", i, st);
		close(go[i][1]);
		close(done[i][0]);
	}
	expect_uncertain(c, "lost", CARMY_STATE_INTERRUPTED, lost);
}
END_TEST

/* ------------------------------------------------------------ journal */

START_TEST(test_what_retention_forgot_stays_forgotten_after_a_reboot)
{
	const char *never[] = { "--retain", "never", "--capacity", "64",
				"--max-result", "256", "--grace", "0",
				"--store", spec, NULL };
	char old[OLD][CARMY_EXECUTION_ID_LEN + 1], lost[CARMY_EXECUTION_ID_LEN + 1];
	char fresh[CARMY_EXECUTION_ID_LEN + 1];
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	uint64_t finished, killed;
	struct shm_view v;
	char rid[24];

	start(SHORT_AGE, "64", true);
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	for (int i = 0; i < OLD; i++) {
		snprintf(rid, sizeof(rid), "old-%d", i);
		run(c, rid, old[i]);
	}
	interrupt("lost", lost);
	await_gone(&v, old, OLD);
	run(c, "fresh", fresh);
	finished = finished_of(&v, fresh);
	shm_unmap(&v);

	/* The machine goes down: carmyd and the segment with it. */
	e2e_kill9(&d);
	killed = real_ns();
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	e2e_restart(&d, never);
	carmy_close(c);
	c = e2e_connect(&d);
	/* From the journal alone: the forgotten are new, the interrupted
	 * is still interrupted, and the fresh one replays (if it was still
	 * young when carmyd went down). */
	for (int i = 0; i < OLD; i++) {
		snprintf(rid, sizeof(rid), "old-%d", i);
		expect_new(c, rid, old[i]);
	}
	expect_uncertain(c, "lost", CARMY_STATE_INTERRUPTED, lost);
	if (killed < finished + SHORT_AGE_NS) {
		ck_assert_int_eq(begin(c, "fresh", &r), CARMY_REPLAY);
		ck_assert_str_eq(r.execution_id, fresh);
	} else {
		e2e_note("fresh: carmyd killed %.3f s after it finished, past "
			 "the age: not judged",
			 (double)(killed - finished) / 1e9);
	}
	carmy_reservation_clear(&r);
}
END_TEST

/* ------------------------------------------------------------ forget */

static int forget(const char *exec, char *err, size_t size)
{
	const char *const args[] = { "forget", exec, NULL };

	return e2e_carmyctl(&d, (uid_t)-1, 0, NULL, 0, err, size, args);
}

START_TEST(test_forget_takes_only_a_completed_execution)
{
	const char *never[] = { "--retain", "never", "--capacity", "64",
				"--max-result", "256", "--grace", "0",
				"--store", spec, NULL };
	char done[CARMY_EXECUTION_ID_LEN + 1], kept[CARMY_EXECUTION_ID_LEN + 1];
	char lost[CARMY_EXECUTION_ID_LEN + 1], err[2048];
	struct carmy_reservation held = CARMY_RESERVATION_INIT;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	start("never", "64", true);
	run(c, "done", done);
	run(c, "kept", kept);
	ck_assert_int_eq(begin(c, "held", &held), CARMY_RESERVED);
	interrupt("lost", lost);

	ck_assert_int_eq(forget(done, err, sizeof(err)), 0);
	await_lines("forgot exec_", 1);
	ck_assert_int_ge(logged(done), 1);
	/* Running, interrupted, unknown: refused by name, nothing
	 * changes. */
	ck_assert_int_eq(forget(held.execution_id, err, sizeof(err)), 1);
	ck_assert_msg(strstr(err, "NOT_COMPLETED") != NULL &&
		      strstr(err, "is running") != NULL, "%s", err);
	ck_assert_int_eq(forget(lost, err, sizeof(err)), 1);
	ck_assert_msg(strstr(err, "NOT_COMPLETED") != NULL &&
		      strstr(err, "is interrupted") != NULL, "%s", err);
	ck_assert_int_eq(forget("exec_00000000000000000000000000000000", err,
				sizeof(err)), 1);
	ck_assert_msg(strstr(err, "NOT_FOUND") != NULL, "%s", err);
	/* Forgotten already: not found either. */
	ck_assert_int_eq(forget(done, err, sizeof(err)), 1);
	ck_assert_msg(strstr(err, "NOT_FOUND") != NULL, "%s", err);
	ck_assert_int_eq(forget("exec_12", err, sizeof(err)), 64);
	expect_uncertain(c, "held", CARMY_STATE_RUNNING, held.execution_id);
	expect_uncertain(c, "lost", CARMY_STATE_INTERRUPTED, lost);
	ck_assert_int_eq(begin(c, "kept", &r), CARMY_REPLAY);

	/* Recorded in the journal: a reboot does not bring it back. */
	e2e_kill9(&d);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	e2e_restart(&d, never);
	carmy_close(c);
	c = e2e_connect(&d);
	expect_new(c, "done", done);
	ck_assert_int_eq(begin(c, "kept", &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, kept);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&held);
}
END_TEST

/* ------------------------------------------------------------ capacity */

#define CAP 20

/* Reserve rid and keep it running in held. */
static void hold(const char *rid, struct carmy_reservation *held)
{
	*held = (struct carmy_reservation)CARMY_RESERVATION_INIT;
	ck_assert_int_eq(begin(c, rid, held), CARMY_RESERVED);
}

START_TEST(test_a_filling_table_warns_once_per_crossing)
{
	struct carmy_reservation h[8], r = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1], rid[16];

	start("never", "20", false);
	/* 14 completed and 2 running: 16 of 20, 80%. */
	for (int i = 0; i < 14; i++) {
		snprintf(rid, sizeof(rid), "c-%d", i);
		run(c, rid, exec);
	}
	hold("h-0", &h[0]);
	hold("h-1", &h[1]);
	await_lines("past 80%", 1);
	ck_assert_int_ge(logged("(16 of 20 entries in use)"), 1);
	/* 19 of 20: past 95%. */
	for (int i = 2; i < 5; i++) {
		snprintf(rid, sizeof(rid), "h-%d", i);
		hold(rid, &h[i]);
	}
	await_lines("past 95%", 1);
	/* Full: refused, and the first refusal is told with what to do;
	 * those that follow within the minute are not. */
	hold("h-5", &h[5]);
	ck_assert_int_eq(begin(c, "one-more", &r), CARMY_ECAPACITY);
	await_lines("refused: the table is full", 1);
	ck_assert_int_ge(logged("raise --capacity, set a shorter --retain "
				"(now never), or run carmyctl purge "
				"--older-than AGE"), 1);
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(begin(c, "one-more", &r), CARMY_ECAPACITY);
	/* Down to 17 (85%): below 90%, the 95% warning may come again. */
	for (int i = 5; i >= 3; i--)
		ck_assert_int_eq(carmy_release(c, &h[i]), 0);
	await_lines("back below 90%", 1);
	ck_assert_int_eq(logged("refused: the table is full"), 1);
	ck_assert_int_eq(logged("past 95%"), 1);
	ck_assert_int_eq(logged("past 80%"), 1);
	hold("h-3", &h[3]);
	hold("h-4", &h[4]);
	await_lines("past 95%", 2);
	ck_assert_int_eq(logged("past 80%"), 1);
	/* Down to 14 (70%), and up to 16 again: 80% warns again. */
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(carmy_release(c, &h[i]), 0);
	await_lines("back below 75%", 1);
	hold("h-6", &h[6]);
	hold("h-7", &h[7]);
	await_lines("past 80%", 2);
	ck_assert_int_eq(logged("past 95%"), 2);
	ck_assert_int_eq(logged("refused: the table is full"), 1);
	carmy_reservation_clear(&r);
	for (int i = 0; i < 8; i++)
		carmy_reservation_clear(&h[i]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("retain");
	TCase *tc = tcase_create("retain");
	SRunner *sr;
	int failed;

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_only_completed_entries_past_the_age_are_forgotten);
	tcase_add_test(tc, test_never_keeps_every_completed_entry);
	tcase_add_test(tc, test_bad_retain_values_are_refused_by_name);
	tcase_add_test(tc, test_retention_races_clients_and_purges);
	tcase_add_test(tc, test_what_retention_forgot_stays_forgotten_after_a_reboot);
	tcase_add_test(tc, test_forget_takes_only_a_completed_execution);
	tcase_add_test(tc, test_a_filling_table_warns_once_per_crossing);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
