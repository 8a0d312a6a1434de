/*
 * check_settle.c - reconciliation and waiting against a real carmyd.
 *
 * carmy_resolve() settles an interrupted execution as committed (its
 * result replays from then on, with who resolved it recorded) or not (the
 * identity is free again), only with the matching fingerprint and
 * execution id. carmy_wait() turns "still running" into the answer the
 * execution ends with: the replay once it completes, the reservation once
 * it is released, uncertain once its owner dies, and "running" at the
 * deadline. With --store journal:DIR a resolution survives a reboot.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include <sys/socket.h>
#include <sys/un.h>

#include "libclient/wire.h"
#include "tests/e2e/e2e.h"

static struct carmyd_proc d;
static carmy_t *c;
/* carmyd's log, at debug level: what it did that no answer shows. */
static char logdir[64], logpath[96];
/* carmyd has registered a WAIT: what its log says. */
#define WAIT_BEGINS "a wait of up to"

static void setup(void)
{
	const char *opts[] = { "--capacity", "64", "--max-result", "256",
			       "--grace", "0", "--log-level", "debug",
			       "--log-file", logpath, NULL };

	strcpy(logdir, "/tmp/carmy-settle.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(logdir));
	snprintf(logpath, sizeof(logpath), "%s/carmyd.log", logdir);
	e2e_start(&d, opts);
	c = e2e_connect(&d);
}

static void teardown(void)
{
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
	unlink(logpath);
	rmdir(logdir);
}

/* carmyd's log, as e2e_logged() and e2e_await_logged() read it. */
static int logged(const char *what)
{
	return e2e_logged(logpath, what);
}

static bool await_logged(const char *what, int n, int ms)
{
	return e2e_await_logged(logpath, what, n, ms);
}

/* ------------------------------------------------------------ a worker */

/* A process that reserves call, reports the execution id, then does what
 * it is told: 'c' complete with "done", 'r' release, 'x' exit as it is. */
struct worker {
	pid_t pid;
	int cmd, rep;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
};

static void worker_start(struct worker *w, const struct carmy_call *call)
{
	int down[2], up[2];

	ck_assert_int_eq(pipe(down), 0);
	ck_assert_int_eq(pipe(up), 0);
	fflush(NULL);
	w->pid = fork();
	ck_assert_int_ge(w->pid, 0);
	if (w->pid == 0) {
		struct carmy_reservation r = CARMY_RESERVATION_INIT;
		carmy_t *h = NULL;
		char what = 0;
		int rc;

		close(down[1]);
		close(up[0]);
		if (carmy_connect(&h, d.socket) != 0 ||
		    carmy_begin(h, call, &r) != CARMY_RESERVED)
			_exit(2);
		if (write(up[1], r.execution_id, sizeof(r.execution_id)) !=
		    (ssize_t)sizeof(r.execution_id))
			_exit(3);
		if (read(down[0], &what, 1) != 1 || what == 'x')
			_exit(0);
		rc = what == 'c' ? carmy_complete(h, &r, CARMY_STATUS_COMPLETED,
						  "done", 4) :
				   carmy_release(h, &r);
		_exit(rc == 0 ? 0 : 4);
	}
	close(down[0]);
	close(up[1]);
	w->cmd = down[1];
	w->rep = up[0];
	ck_assert_msg(e2e_read_full(w->rep, w->exec, sizeof(w->exec),
				    HARNESS_WAIT_MS) == 0,
		      "the worker did not reserve");
	ck_assert(e2e_exec_id_valid(w->exec));
}

/* Tell it what to do and wait for it to be done; its exit status. */
static int worker_do(struct worker *w, char what)
{
	int st;

	ck_assert_int_eq(write(w->cmd, &what, 1), 1);
	st = harness_waitpid(w->pid, HARNESS_WAIT_MS);
	ck_assert_msg(st >= 0, "the worker did not finish");
	close(w->cmd);
	close(w->rep);
	w->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* An interrupted execution of call: its worker dies without a word. */
static void interrupted(struct worker *w, const struct carmy_call *call)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	int rc;

	worker_start(w, call);
	ck_assert_int_eq(worker_do(w, 'x'), 0);
	rc = e2e_poll_begin(c, call, &r, CARMY_EUNCERTAIN,
			    CARMY_STATE_INTERRUPTED, 3000, NULL);
	ck_assert_msg(rc == CARMY_EUNCERTAIN && r.state == CARMY_STATE_INTERRUPTED,
		      "not interrupted: %s (%s)", carmy_errname(rc),
		      carmy_state_name(r.state));
	ck_assert_str_eq(r.execution_id, w->exec);
	carmy_reservation_clear(&r);
}

/* ------------------------------------------------------------ resolve */

START_TEST(test_resolved_as_committed_replays_its_result)
{
	struct carmy_call call = E2E_CALL("p", "s", "charged");
	struct carmy_call other = call;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct worker w;
	struct shm_view v;
	uint8_t exec[SHM_EXEC_LEN];
	bool found = false;

	interrupted(&w, &call);
	/* Another call under the same identity may not settle it. */
	other.tool = "other";
	other.tool_len = 5;
	ck_assert_int_eq(carmy_resolve(c, &other, w.exec, 1,
				       CARMY_STATUS_COMPLETED, "x", 1),
			 CARMY_ECONFLICT);
	/* Nor an execution id it does not have. */
	ck_assert_int_eq(carmy_resolve(c, &call,
				       "exec_00000000000000000000000000000001",
				       1, CARMY_STATUS_COMPLETED, "x", 1),
			 CARMY_ENOT_INTERRUPTED);
	ck_assert_int_eq(carmy_resolve(c, &call, w.exec, 1, 99, "x", 1),
			 CARMY_EINVALID_STATUS);
	ck_assert_int_eq(carmy_resolve(c, &call, "exec_nothex", 1,
				       CARMY_STATUS_COMPLETED, "x", 1), -EINVAL);

	ck_assert_int_eq(carmy_resolve(c, &call, w.exec, 1,
				       CARMY_STATUS_COMPLETED, "order 17", 8), 0);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, w.exec);
	ck_assert_int_eq(r.status, CARMY_STATUS_COMPLETED);
	ck_assert_uint_eq(r.result_len, 8);
	ck_assert_mem_eq(r.result, "order 17", 8);
	/* Settled once: not again. */
	ck_assert_int_eq(carmy_resolve(c, &call, w.exec, 0, 0, NULL, 0),
			 CARMY_ENOT_INTERRUPTED);

	/* Who and when are in the entry. */
	e2e_exec_bytes(w.exec, exec);
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	for (uint32_t e = 0; e < v.geo.capacity; e++) {
		const struct shm_entry *en = shm_entry_at(&v, e);

		if (memcmp(en->en_exec, exec, SHM_EXEC_LEN) != 0)
			continue;
		found = true;
		ck_assert_uint_eq(en->en_resolved_pid, (uint32_t)getpid());
		ck_assert_uint_eq(en->en_resolved_uid, (uint32_t)getuid());
		ck_assert_uint_ne(en->en_resolved_ns, 0);
	}
	shm_unmap(&v);
	ck_assert(found);
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_resolved_as_not_committed_frees_the_identity)
{
	struct carmy_call call = E2E_CALL("p", "s", "not-charged");
	struct carmy_call other = call;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct worker w;

	interrupted(&w, &call);
	/* Freeing it takes the matching fingerprint too: another call under
	 * the same identity may not, and the entry stays as it was. */
	other.tool = "other";
	other.tool_len = 5;
	ck_assert_int_eq(carmy_resolve(c, &other, w.exec, 0, 0, NULL, 0),
			 CARMY_ECONFLICT);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_INTERRUPTED);
	carmy_reservation_clear(&r);
	ck_assert_int_eq(carmy_resolve(c, &call, w.exec, 0, 0, NULL, 0), 0);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, w.exec);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "2nd", 3),
			 0);
	ck_assert_int_eq(carmy_resolve(c, &call, w.exec, 0, 0, NULL, 0),
			 CARMY_ENOT_INTERRUPTED);
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_running_or_completed_cannot_be_resolved)
{
	struct carmy_call call = E2E_CALL("p", "s", "busy");
	struct carmy_call none = E2E_CALL("p", "s", "never-seen");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct worker w;

	worker_start(&w, &call);
	ck_assert_int_eq(carmy_resolve(c, &call, w.exec, 0, 0, NULL, 0),
			 CARMY_ENOT_INTERRUPTED);
	ck_assert_int_eq(worker_do(&w, 'c'), 0);
	ck_assert_int_eq(carmy_resolve(c, &call, w.exec, 0, 0, NULL, 0),
			 CARMY_ENOT_INTERRUPTED);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
	ck_assert_int_eq(carmy_resolve(c, &none, w.exec, 0, 0, NULL, 0),
			 CARMY_ENOT_INTERRUPTED);
	carmy_reservation_clear(&r);
}
END_TEST

/* ------------------------------------------------------------ wait */

struct waiter {
	pthread_t t;
	struct carmy_call call;
	int timeout_ms;
	int rc;
	struct carmy_reservation r;
	uint64_t ns;		/* how long it waited */
	uint64_t done_ns;	/* when it was answered */
};

static void *wait_thread(void *arg)
{
	struct waiter *wt = arg;
	uint64_t t0 = harness_now_ns();

	wt->r = (struct carmy_reservation)CARMY_RESERVATION_INIT;
	wt->rc = carmy_wait(c, &wt->call, &wt->r, wt->timeout_ms);
	wt->done_ns = harness_now_ns();
	wt->ns = wt->done_ns - t0;
	return NULL;
}

/* Start a waiter on call and return once carmyd has it among its
 * waiters (it logs each wait it registers). */
static void waiter_start(struct waiter *wt, const struct carmy_call *call,
			 int timeout_ms)
{
	int before = logged(WAIT_BEGINS);

	wt->call = *call;
	wt->timeout_ms = timeout_ms;
	ck_assert_int_eq(pthread_create(&wt->t, NULL, wait_thread, wt), 0);
	ck_assert_msg(await_logged(WAIT_BEGINS, before, HARNESS_WAIT_MS),
		      "carmyd never registered the waiter");
}

START_TEST(test_wait_gets_the_replay_when_it_completes)
{
	struct carmy_call call = E2E_CALL("p", "s", "slow");
	struct waiter wt;
	struct worker w;

	worker_start(&w, &call);
	waiter_start(&wt, &call, 20000);
	ck_assert_int_eq(worker_do(&w, 'c'), 0);
	ck_assert_int_eq(pthread_join(wt.t, NULL), 0);
	ck_assert_msg(wt.rc == CARMY_REPLAY, "wait: %s", carmy_errname(wt.rc));
	ck_assert_str_eq(wt.r.execution_id, w.exec);
	ck_assert_mem_eq(wt.r.result, "done", 4);
	ck_assert_msg(wt.ns < 20000ull * 1000000u, "it waited for the deadline");
	e2e_note("replayed after waiting %.1f ms", (double)wt.ns / 1e6);
	carmy_reservation_clear(&wt.r);
}
END_TEST

/*
 * The release told carmyd, which woke the waiter then rather than on its
 * 100 ms tick. The tick can still come first, between the worker's
 * release in the table and carmyd reading its word (carmyd logs which of
 * the two told the waiter): then the try is made again with a new
 * identity. A carmyd that never wakes on a release fails every try. The
 * latency is quoted, not asserted: a loaded machine is slow.
 */
START_TEST(test_wait_gets_the_reservation_when_it_is_released)
{
	const char *told = "released: 1 waiter told at once";
	const char *ticked = "1 waiter told at the tick";
	int try;

	for (try = 0; try < 3; try++) {
		char rid[32];
		struct carmy_call call;
		struct waiter wt;
		struct worker w;
		int n_told = logged(told), n_ticked = logged(ticked);
		uint64_t t0;
		double ms;

		snprintf(rid, sizeof(rid), "given-back-%d", try);
		call = E2E_CALL("p", "s", rid);
		worker_start(&w, &call);
		waiter_start(&wt, &call, 20000);
		t0 = harness_now_ns();
		ck_assert_int_eq(worker_do(&w, 'r'), 0);
		ck_assert_int_eq(pthread_join(wt.t, NULL), 0);
		ck_assert_msg(wt.rc == CARMY_RESERVED, "wait: %s",
			      carmy_errname(wt.rc));
		ck_assert_str_ne(wt.r.execution_id, w.exec);
		ck_assert_int_eq(carmy_complete(c, &wt.r,
						CARMY_STATUS_COMPLETED, "me", 2),
				 0);
		carmy_reservation_clear(&wt.r);
		ms = (double)(wt.done_ns - t0) / 1e6;
		/* One of the two told it; wait for carmyd's line. */
		t0 = harness_now_ns();
		while (logged(told) == n_told && logged(ticked) == n_ticked) {
			ck_assert_msg(e2e_ms_since(t0) < 5000,
				      "carmyd did not wake the waiter on the "
				      "release (nor at the tick)");
			poll(NULL, 0, 2);	/* between looks at the event */
		}
		if (logged(told) > n_told) {
			e2e_note("reserved %.1f ms after the release was "
				 "asked for (try %d)", ms, try + 1);
			return;
		}
		e2e_note("try %d: the tick woke the waiter first", try + 1);
	}
	ck_abort_msg("carmyd did not wake the waiter on the release");
}
END_TEST

START_TEST(test_wait_reports_uncertain_when_the_owner_dies)
{
	struct carmy_call call = E2E_CALL("p", "s", "dies");
	struct waiter wt;
	struct worker w;

	worker_start(&w, &call);
	waiter_start(&wt, &call, 20000);
	ck_assert_int_eq(worker_do(&w, 'x'), 0);
	ck_assert_int_eq(pthread_join(wt.t, NULL), 0);
	ck_assert_msg(wt.rc == CARMY_EUNCERTAIN &&
			      wt.r.state == CARMY_STATE_INTERRUPTED,
		      "wait: %s (%s)", carmy_errname(wt.rc),
		      carmy_state_name(wt.r.state));
	ck_assert_str_eq(wt.r.execution_id, w.exec);
	carmy_reservation_clear(&wt.r);
}
END_TEST

START_TEST(test_wait_ends_at_its_deadline_still_running)
{
	struct carmy_call call = E2E_CALL("p", "s", "long");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct worker w;
	uint64_t t0;
	int rc;

	worker_start(&w, &call);
	t0 = harness_now_ns();
	rc = carmy_wait(c, &call, &r, 300);
	ck_assert_msg(rc == CARMY_EUNCERTAIN && r.state == CARMY_STATE_RUNNING,
		      "wait: %s (%s)", carmy_errname(rc),
		      carmy_state_name(r.state));
	ck_assert_msg(e2e_ms_since(t0) >= 300.0, "gave up after %.0f ms",
		      e2e_ms_since(t0));
	/* Reported, not asserted (a loaded machine may be late): carmyd
	 * arms a timer for the deadline, so this is near 300 ms, not up to
	 * a 100 ms tick later. */
	e2e_note("a 300 ms wait gave up after %.1f ms", e2e_ms_since(t0));
	/* Not a millisecond early either. libcarmy once counted in whole
	 * milliseconds: a wait begun just before a millisecond ended that
	 * was still running when libcarmy looked just after it sent carmyd
	 * one millisecond less, or none. So begin 1 ms waits at 0.5 us
	 * steps before a millisecond ends (same clock as libcarmy's). */
	for (int i = 0; i < 200; i++) {
		uint64_t lead = 1000 + 500 * (uint64_t)i, at;

		do {
			t0 = harness_now_ns();
			at = 1000000 - t0 % 1000000;
		} while (at > lead || at + 2000 < lead);
		rc = carmy_wait(c, &call, &r, 1);
		ck_assert_int_eq(rc, CARMY_EUNCERTAIN);
		ck_assert_msg(e2e_ms_since(t0) >= 1.0,
			      "a 1 ms wait begun %.1f us before a millisecond "
			      "ended gave up after %.3f ms", at / 1000.0,
			      e2e_ms_since(t0));
	}
	/* A wait of 0 is a begin. */
	ck_assert_int_eq(carmy_wait(c, &call, &r, 0), CARMY_EUNCERTAIN);
	ck_assert_int_eq(worker_do(&w, 'c'), 0);
	ck_assert_int_eq(carmy_wait(c, &call, &r, 0), CARMY_REPLAY);
	carmy_reservation_clear(&r);
}
END_TEST

/* A stalled carmyd (stopped here) holds a wait up no longer than its
 * deadline and the second carmyd may take to answer it, not the 10 s a
 * connection's first word may take (libcarmy used to wait that long for
 * the HELLO of the wait's own connection). The bound asserted is 5 s, far
 * from both, so that a loaded machine cannot fail it. */
START_TEST(test_wait_keeps_its_deadline_with_carmyd_stalled)
{
	struct carmy_call call = E2E_CALL("p", "s", "stalled");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct worker w;
	uint64_t t0;
	double ms;
	int rc;

	worker_start(&w, &call);
	ck_assert_int_eq(kill(d.pid, SIGSTOP), 0);
	t0 = harness_now_ns();
	rc = carmy_wait(c, &call, &r, 300);
	ms = e2e_ms_since(t0);
	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	ck_assert_msg(rc == CARMY_EUNCERTAIN && r.state == CARMY_STATE_RUNNING,
		      "wait: %s (%s)", carmy_errname(rc),
		      carmy_state_name(r.state));
	ck_assert_msg(ms < 5000.0, "a 300 ms wait took %.0f ms", ms);
	e2e_note("a 300 ms wait on a stopped carmyd gave up after %.1f ms", ms);
	ck_assert_int_eq(worker_do(&w, 'c'), 0);
	carmy_reservation_clear(&r);
}
END_TEST

/* ------------------------------------------------------------ durable */

START_TEST(test_resolution_survives_a_reboot_with_the_journal)
{
	char dir[] = "/tmp/check_settle.XXXXXX", spec[96], cmd[128];
	const char *jopts[] = { "--capacity", "64", "--max-result", "256",
				"--grace", "0", "--store", spec, NULL };
	struct carmy_call yes = E2E_CALL("p", "s", "yes");
	struct carmy_call no = E2E_CALL("p", "s", "no");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct worker wy, wn;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(spec, sizeof(spec), "journal:%s/j", dir);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
	e2e_start(&d, jopts);
	c = e2e_connect(&d);
	interrupted(&wy, &yes);
	interrupted(&wn, &no);
	ck_assert_int_eq(carmy_resolve(c, &yes, wy.exec, 1,
				       CARMY_STATUS_FAILED, "declined", 8), 0);
	ck_assert_int_eq(carmy_resolve(c, &no, wn.exec, 0, 0, NULL, 0), 0);
	carmy_close(c);
	c = NULL;

	e2e_kill9(&d);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	e2e_restart(&d, jopts);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &yes, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, wy.exec);
	ck_assert_int_eq(r.status, CARMY_STATUS_FAILED);
	ck_assert_mem_eq(r.result, "declined", 8);
	ck_assert_int_eq(carmy_begin(c, &no, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	carmy_reservation_clear(&r);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ------------------------------------------------------------ raw wire */

/* A connection that says HELLO and then sends what a test builds: what a
 * buggy or hostile peer could send. */
static int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	msgpack_sbuffer sb;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), code;

	ck_assert_int_ge(fd, 0);
	strcpy(sa.sun_path, d.socket);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	msgpack_sbuffer_init(&sb);
	ck_assert_int_eq(wire_put_hello(&sb, shm_layout_signature(), 0, 0), 0);
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	msgpack_sbuffer_destroy(&sb);
	(void)code;
	return fd;
}

/* The ack slot and bell of the last HELLO reply raw_reply() read. */
static uint32_t raw_slot, raw_bell;

/* Read one reply of type; its code. */
static int raw_reply(int fd, int type)
{
	uint8_t buf[512];
	struct wire_msg m;
	size_t have = 0;
	long n = 0;

	while (n == 0) {
		ck_assert_int_eq(e2e_read_full(fd, buf + have, 1,
					       HARNESS_WAIT_MS), 0);
		have++;
		n = wire_scan(buf, have, sizeof(buf));
		ck_assert_int_ge(n, 0);
	}
	ck_assert_int_eq(wire_decode(buf, have, 0, &m), 0);
	ck_assert_int_eq(m.type, type);
	if (m.type == WIRE_HELLO) {
		raw_slot = m.u.hello_ok.ack_slot;
		raw_bell = m.u.hello_ok.bell;
	}
	return m.type == WIRE_HELLO ? 0 : m.u.reply.code;
}

/* Restart carmyd on a journal in dir (a mkdtemp template), with our
 * handle c on it; spec holds its --store. */
static void restart_with_journal(char *dir, char spec[96])
{
	static const char *jopts[] = { "--capacity", "64", "--max-result",
				       "256", "--grace", "0", "--store",
				       NULL, NULL };

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(spec, 96, "journal:%s/j", dir);
	jopts[7] = spec;
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
	e2e_start(&d, jopts);
	c = e2e_connect(&d);
}

static void remove_dir(const char *dir)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* The entry index of an execution, from the segment. */
static uint32_t entry_of(const char *exec_id)
{
	uint8_t exec[SHM_EXEC_LEN];
	struct shm_view v;
	uint32_t found = UINT32_MAX;

	e2e_exec_bytes(exec_id, exec);
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	for (uint32_t e = 0; e < v.geo.capacity; e++)
		if (memcmp(shm_entry_at(&v, e)->en_exec, exec, SHM_EXEC_LEN) == 0)
			found = e;
	shm_unmap(&v);
	ck_assert_uint_ne(found, UINT32_MAX);
	return found;
}

/*
 * On a new raw connection (returned, its HELLO read): exec's completion
 * in entry e, recorded with the result "abc", sent again with exactly
 * that result is answered 0 in the connection's ack slot alone (nothing
 * comes on the socket: the refusal that follows is the next thing read);
 * with another result, refused on the socket, with the word saying so;
 * and a success the slot does not await comes on the socket.
 */
static int completions_answered_in_the_slot(uint32_t e, const uint8_t *exec)
{
	struct shm_view v;
	msgpack_sbuffer sb;
	uint32_t last;
	int fd = raw_connect();

	ck_assert_int_eq(raw_reply(fd, WIRE_HELLO), 0);
	ck_assert_uint_lt(raw_slot, SHM_ACK_SLOTS);
	ck_assert_int_eq(shm_map(d.segment, true, &v), 0);
	last = v.acks[raw_slot].ak_word;	/* carmyd's mark */
	msgpack_sbuffer_init(&sb);
	ck_assert_int_eq(wire_put_complete(&sb, e, exec, CARMY_STATUS_COMPLETED,
					   0, "abc", 3), 0);
	ck_assert(shm_ack_expect(&v, raw_slot, &last, exec));
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	ck_assert_int_eq(shm_ack_wait(&v, raw_slot, &last, exec, 20000),
			 SHM_ACK_DONE);
	sb.size = 0;
	ck_assert_int_eq(wire_put_complete(&sb, e, exec, CARMY_STATUS_COMPLETED,
					   0, "abd", 3), 0);
	ck_assert(shm_ack_expect(&v, raw_slot, &last, exec));
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	ck_assert_int_eq(shm_ack_wait(&v, raw_slot, &last, exec, 20000),
			 SHM_ACK_SOCKET);
	ck_assert_int_ne(raw_reply(fd, WIRE_COMPLETE), 0);
	/* Not awaited in the slot: even a success comes on the socket. */
	sb.size = 0;
	ck_assert_int_eq(wire_put_complete(&sb, e, exec, CARMY_STATUS_COMPLETED,
					   0, "abc", 3), 0);
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	ck_assert_int_eq(raw_reply(fd, WIRE_COMPLETE), 0);
	shm_unmap(&v);
	msgpack_sbuffer_destroy(&sb);
	return fd;
}

/*
 * With the memory store too, a completion's success is told in the
 * connection's ack slot (completions_answered_in_the_slot()). The
 * connection gets no bell: only a durable store's reservations are
 * posted.
 */
START_TEST(test_memory_completion_is_told_in_the_ack_slot)
{
	struct carmy_call call = E2E_CALL("p", "s", "mem-ack");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	uint8_t exec[SHM_EXEC_LEN];

	ck_assert_int_eq(carmy_durable(c), 0);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "abc", 3),
			 0);
	e2e_exec_bytes(r.execution_id, exec);
	close(completions_answered_in_the_slot(entry_of(r.execution_id), exec));
	ck_assert_uint_ge(raw_bell, SHM_BELLS);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
	carmy_reservation_clear(&r);
}
END_TEST

/*
 * With the journal: a completion sent again (as after a reconnect) with
 * exactly the recorded result is answered 0, with another result refused,
 * each in the ack slot or on the socket as above; a RELEASE for an
 * execution still in the table (running here, another client's) is
 * refused, so the journal cannot be made to forget it.
 */
START_TEST(test_durable_requests_are_checked_against_the_table)
{
	char dir[] = "/tmp/check_settle.XXXXXX", spec[96];
	struct carmy_call done = E2E_CALL("p", "s", "done-once");
	struct carmy_call held = E2E_CALL("p", "s", "held");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	uint8_t exec[SHM_EXEC_LEN];
	msgpack_sbuffer sb;
	struct worker w;
	int fd;

	restart_with_journal(dir, spec);
	ck_assert_int_eq(carmy_begin(c, &done, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "abc", 3),
			 0);
	e2e_exec_bytes(r.execution_id, exec);
	fd = completions_answered_in_the_slot(entry_of(r.execution_id), exec);

	worker_start(&w, &held);
	e2e_exec_bytes(w.exec, exec);
	msgpack_sbuffer_init(&sb);
	ck_assert_int_eq(wire_put_reserve(&sb, WIRE_RELEASE, entry_of(w.exec),
					  exec), 0);
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	ck_assert_int_eq(raw_reply(fd, WIRE_RELEASE), CARMY_ENOT_RESERVED);
	msgpack_sbuffer_destroy(&sb);
	close(fd);
	ck_assert_int_eq(worker_do(&w, 'c'), 0);
	ck_assert_int_eq(carmy_begin(c, &held, &r), CARMY_REPLAY);
	carmy_reservation_clear(&r);
	remove_dir(dir);
}
END_TEST

/*
 * A peer that posts a request in its slot and hangs up at once: carmyd's
 * loop, woken by the hang-up, must not take the post in the same batch
 * (answering it drops the connection, which the batch's hang-up event
 * then named: a use after free, which the ASan run of this suite reports).
 * Here the request is refused (an entry not its own), whole or torn, and
 * the bell is set as a client that read it a moment earlier would see it.
 */
START_TEST(test_a_peer_that_posts_and_hangs_up_harms_no_one)
{
	char dir[] = "/tmp/check_settle.XXXXXX", spec[96];
	struct carmy_call call = E2E_CALL("p", "s", "after-hang-up");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct shm_post p = { .type = WIRE_RESERVE, .entry = 3 };
	struct shm_view v;

	restart_with_journal(dir, spec);
	memset(p.exec, 0x5c, sizeof(p.exec));
	ck_assert_int_eq(shm_map(d.segment, true, &v), 0);
	for (int torn = 0; torn < 2; torn++) {
		int fd = raw_connect();
		uint32_t last, gen;

		ck_assert_int_eq(raw_reply(fd, WIRE_HELLO), 0);
		ck_assert_uint_lt(raw_bell, SHM_BELLS);
		last = v.acks[raw_slot].ak_word;	/* carmyd's mark */
		gen = last >> 2;
		ck_assert(shm_ack_expect(&v, raw_slot, &last, p.exec));
		e2e_post_awake(&v, raw_slot, raw_bell, gen, &p);
		if (torn)
			v.acks[raw_slot].ak_exec[5] ^= 1;
		close(fd);
	}
	shm_unmap(&v);
	/* carmyd is there, and serves. */
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok", 2),
			 0);
	ck_assert(e2e_alive(&d));
	remove_dir(dir);
}
END_TEST

/*
 * A peer that sends its next request without waiting for the reply to a
 * WAIT: carmyd reads nothing more until the WAIT is answered, answers the
 * two in order, and does not spin meanwhile (its loop keeps input armed
 * while a request is pending and takes it out only when more arrives; a
 * level-triggered input left armed would wake the loop without end).
 */
START_TEST(test_a_request_sent_behind_a_wait_is_answered_after_it)
{
	struct carmy_call held = E2E_CALL("p", "s", "held-long");
	const void *part[3] = { held.principal, held.session,
				held.request_id };
	const size_t len[3] = { held.principal_len, held.session_len,
				held.request_id_len };
	const uint8_t fp[SHM_FP_LEN] = { 0 };
	const long hz = sysconf(_SC_CLK_TCK);
	const int wait_ms = 600;
	uint8_t exec[SHM_EXEC_LEN];
	unsigned long long t0, used;
	msgpack_sbuffer sb;
	struct worker w;
	uint64_t start;
	int fd, waits;

	worker_start(&w, &held);
	e2e_exec_bytes(w.exec, exec);
	fd = raw_connect();
	ck_assert_int_eq(raw_reply(fd, WIRE_HELLO), 0);
	msgpack_sbuffer_init(&sb);
	ck_assert_int_eq(wire_put_settle(&sb, WIRE_WAIT, part, len, exec, fp,
					 0, 0, NULL, 0, (uint32_t)wait_ms), 0);
	waits = logged(WAIT_BEGINS);
	start = harness_now_ns();
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	/* Once the WAIT is pending, the next request: it stays in the
	 * socket, readable, until the WAIT is answered. */
	ck_assert_msg(await_logged(WAIT_BEGINS, waits, HARNESS_WAIT_MS),
		      "carmyd never registered the WAIT");
	sb.size = 0;
	ck_assert_int_eq(wire_put_reclaim(&sb), 0);
	t0 = e2e_cpu_ticks(d.pid);
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	msgpack_sbuffer_destroy(&sb);
	/* The entry runs on: the WAIT ends at its deadline, first. */
	ck_assert_int_eq(raw_reply(fd, WIRE_WAIT), -ETIMEDOUT);
	used = e2e_cpu_ticks(d.pid) - t0;
	ck_assert_msg(e2e_ms_since(start) >= wait_ms - 1,
		      "the WAIT was answered before its deadline");
	ck_assert_int_eq(raw_reply(fd, WIRE_RECLAIM), 0);
	e2e_note("carmyd used %llu ms of CPU in a %d ms wait",
		 used * 1000 / (unsigned long long)hz, wait_ms);
	/* Under a quarter of a CPU; a loop woken without end takes one. */
	ck_assert_msg(used * 1000 * 4 < (unsigned long long)hz * wait_ms,
		      "carmyd used %llu clock ticks (%ld a second) while "
		      "one WAIT was pending", used, hz);
	close(fd);
	ck_assert_int_eq(worker_do(&w, 'c'), 0);
}
END_TEST

/* A resolution with the longest identity and the largest result fits in a
 * message; a larger result is refused before anything is sent, and the
 * handle's other reservations are untouched. */
START_TEST(test_resolve_with_the_largest_identity_and_result)
{
	char rid[CARMY_ID_MAX + 1], big[257];
	struct carmy_call call, other = E2E_CALL("p", "s", "other");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct worker w;

	memset(rid, 'r', CARMY_ID_MAX);
	rid[CARMY_ID_MAX] = '\0';
	memset(big, 'x', sizeof(big));
	call = (struct carmy_call)E2E_CALL("p", "s", rid);
	interrupted(&w, &call);
	ck_assert_int_eq(carmy_begin(c, &other, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_resolve(c, &call, w.exec, 1,
				       CARMY_STATUS_COMPLETED, big, 257),
			 CARMY_ERESULT_TOO_LARGE);
	ck_assert_int_eq(carmy_resolve(c, &call, w.exec, 1,
				       CARMY_STATUS_COMPLETED, big, 256), 0);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "o", 1),
			 0);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
	ck_assert_uint_eq(r.result_len, 256);
	carmy_reservation_clear(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("settle");
	TCase *tc = tcase_create("settle");
	SRunner *sr;
	int failed;

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_resolved_as_committed_replays_its_result);
	tcase_add_test(tc, test_resolved_as_not_committed_frees_the_identity);
	tcase_add_test(tc, test_running_or_completed_cannot_be_resolved);
	tcase_add_test(tc, test_wait_gets_the_replay_when_it_completes);
	tcase_add_test(tc, test_wait_gets_the_reservation_when_it_is_released);
	tcase_add_test(tc, test_wait_reports_uncertain_when_the_owner_dies);
	tcase_add_test(tc, test_wait_ends_at_its_deadline_still_running);
	tcase_add_test(tc, test_wait_keeps_its_deadline_with_carmyd_stalled);
	tcase_add_test(tc, test_resolution_survives_a_reboot_with_the_journal);
	tcase_add_test(tc, test_memory_completion_is_told_in_the_ack_slot);
	tcase_add_test(tc, test_durable_requests_are_checked_against_the_table);
	tcase_add_test(tc, test_a_peer_that_posts_and_hangs_up_harms_no_one);
	tcase_add_test(tc, test_a_request_sent_behind_a_wait_is_answered_after_it);
	tcase_add_test(tc, test_resolve_with_the_largest_identity_and_result);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
