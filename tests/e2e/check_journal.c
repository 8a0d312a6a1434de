/*
 * check_journal.c - carmyd --store journal:DIR against simulated reboots.
 *
 * A reboot is simulated by kill -9 of carmyd (and of its clients) and the
 * removal of the shared segment, which is all that /dev/shm would lose.
 * carmyd then has nothing but its journal: every result it acknowledged
 * must replay byte for byte with its execution id, every reservation it
 * acknowledged without a result must be uncertain (interrupted), never free
 * to run again, and a released identity must be free. Also: a journal torn
 * at any byte starts as a clean prefix, damage in the middle is refused
 * rather than cut, and bad --store values are refused before any segment
 * is made.
 *
 * Every journal lives in a directory of its own under one temp root per run
 * (root), removed at the end of main even when a test failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "libclient/wire.h"
#include "libclient/reservation.h"
#include "tests/e2e/e2e.h"

/* The temp root of this run, and a counter naming directories in it. */
static char root[64];
static unsigned dir_seq;

static struct carmyd_proc d;
/* Closed by teardown even if the test failed without fork. */
static carmy_t *c;

static const int statuses[] = { CARMY_STATUS_COMPLETED, CARMY_STATUS_FAILED,
				CARMY_STATUS_TIMED_OUT, CARMY_STATUS_CANCELLED };

/* ------------------------------------------------------------ helpers */

/* The end of a test that went well: its handle, carmyd and directory go. */
static void finish(const char *dir)
{
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
	memset(&d, 0, sizeof(d));
	e2e_rm_rf(dir);
}

/* A fresh directory under root; out gets its path. Unique, not numbered:
 * each test runs in a process of its own, and a failed one leaves its
 * directories behind for the end of main. */
static void new_dir(char *out, size_t size)
{
	int n = snprintf(out, size, "%s/t%u.XXXXXX", root, dir_seq++);

	ck_assert(n > 0 && (size_t)n < size);
	ck_assert_msg(mkdtemp(out) != NULL, "mkdtemp %s: %s", out,
		      strerror(errno));
}

/* carmy_begin's code by name; CARMY_RESERVED (0) is "OK" to errname. */
static const char *outcome(int rc)
{
	return rc == CARMY_RESERVED ? "RESERVED (free to run again)" :
				      carmy_errname(rc);
}

/* carmyd's options for a journal in dir/j; spec is the caller's buffer,
 * which must outlive opts. No grace period: these tests judge entries of
 * dead owners right after a restart (check_restart covers the grace). */
/* With spin_us set, carmyd's loops poll that long after each event: awake,
 * they take the requests clients post in their slots (shm_post). */
static const char *spin_us;

static void expect_refusal(const char *const *extra, int want_exit,
			   const char *want_log);
static void journal_opts(const char *opts[16], char *spec, size_t size,
			 const char *dir, const char *capacity,
			 const char *max_result)
{
	int n = snprintf(spec, size, "journal:%s/j", dir);

	ck_assert(n > 0 && (size_t)n < size);
	opts[0] = "--capacity";
	opts[1] = capacity;
	opts[2] = "--max-result";
	opts[3] = max_result;
	opts[4] = "--store";
	opts[5] = spec;
	opts[6] = "--grace";
	opts[7] = "0";
	opts[8] = spin_us ? "--spin-us" : NULL;
	opts[9] = spin_us;
	opts[10] = NULL;
}

/* How many slots of the segment named say a request posted there was
 * taken by carmyd. Every request ever posted is a reservation: a
 * completion goes on the socket, always. */
static unsigned posts_taken(const char *segment)
{
	struct shm_view v;
	unsigned n = 0;

	ck_assert_int_eq(shm_map(segment, false, &v), 0);
	for (uint32_t i = 0; i < SHM_ACK_SLOTS; i++) {
		uint32_t w = __atomic_load_n(&v.acks[i].ak_post,
					     __ATOMIC_ACQUIRE);

		n += (w & 3) == 2;
		if (w != 0)
			ck_assert_uint_eq(v.acks[i].ak_type, WIRE_RESERVE);
	}
	shm_unmap(&v);
	return n;
}

static void journal_path(char *out, size_t size, const char *dir)
{
	int n = snprintf(out, size, "%s/j/journal", dir);

	ck_assert(n > 0 && (size_t)n < size);
}

/* What a reboot takes with it besides the processes: the segment. */
static void lose_segment(const struct carmyd_proc *p)
{
	ck_assert_msg(shm_unlink(p->segment) == 0, "shm_unlink %s: %s",
		      p->segment, strerror(errno));
}

static bool segment_exists(const char *name)
{
	int fd = shm_open(name, O_RDONLY, 0);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static uint8_t *read_file(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	ck_assert_int_eq(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size + 1);
	ck_assert_ptr_nonnull(buf);
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		ck_assert_msg(n > 0, "read %s: %s", path, strerror(errno));
		got += (size_t)n;
	}
	close(fd);
	buf[got] = 0;
	*len = got;
	return buf;
}

/* Write len bytes of buf, then zeros up to size (>= len). */
static void write_file(const char *path, const uint8_t *buf, size_t len,
		       size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t off = 0;

	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	while (off < len) {
		ssize_t n = write(fd, buf + off, len - off);

		ck_assert_msg(n > 0, "write %s: %s", path, strerror(errno));
		off += (size_t)n;
	}
	/* A hole reads as zeros: the preallocated clean end. */
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

/* A seeded PRNG (xorshift64*), so that a failing run can be repeated. */
static uint64_t rng_state;

static void rng_seed(void)
{
	const char *env = getenv("CARMY_TEST_SEED");

	rng_state = env != NULL ? strtoull(env, NULL, 0) :
				  harness_now_ns() ^ ((uint64_t)getpid() << 32);
	if (rng_state == 0)
		rng_state = 1;
	e2e_note("seed %llu (CARMY_TEST_SEED=%llu repeats this run)",
		 (unsigned long long)rng_state, (unsigned long long)rng_state);
}

static uint64_t rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(2685821657736338717);
}

static void backoff(unsigned *us)
{
	struct timespec ts = { 0, (long)*us * 1000 };

	nanosleep(&ts, NULL);
	if (*us < 1000)
		*us *= 2;
}

/* ------------------------------------------------------------ fixture */

static void setup(void)
{
	memset(&d, 0, sizeof(d));
	c = NULL;
}

static void teardown(void)
{
	carmy_close(c);
	c = NULL;
	if (d.socket[0] != '\0')
		e2e_stop(&d);
	memset(&d, 0, sizeof(d));
}

/* ------------------------------------------------------------ expectations */

/* One call and what it must replay. */
struct done {
	char rid[32];
	const uint8_t *args;
	size_t args_len;
	int status;
	int code;		/* 0, or CARMY_ERESULT_TOO_LARGE */
	uint8_t result[512];
	size_t len;		/* what carmy_complete was given */
	size_t want_len;	/* what must replay */
	char exec[CARMY_EXECUTION_ID_LEN + 1];
};

static struct carmy_call call_of(const char *p, const char *s, const char *rid,
				 const uint8_t *args, size_t args_len)
{
	struct carmy_call call = E2E_CALL(p, s, rid);

	call.args = args;
	call.args_len = args_len;
	return call;
}

static void record(carmy_t *h, struct done *dn)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = call_of("p", "s", dn->rid, dn->args,
					 dn->args_len);
	int rc;

	ck_assert_int_eq(carmy_begin(h, &call, &r), CARMY_RESERVED);
	ck_assert(e2e_exec_id_valid(r.execution_id));
	strcpy(dn->exec, r.execution_id);
	rc = carmy_complete(h, &r, dn->status, dn->len ? dn->result : NULL,
			    dn->len);
	/* Acknowledged now: from here on a reboot must not lose it. */
	ck_assert_msg(rc == dn->code, "complete %s: %s", dn->rid,
		      carmy_errname(rc));
	carmy_reservation_clear(&r);
}

static void expect_replay(carmy_t *h, const struct done *dn)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = call_of("p", "s", dn->rid, dn->args,
					 dn->args_len);
	/* A result too large is recorded as a failure, with that code. */
	int want_status = dn->code ? CARMY_STATUS_FAILED : dn->status;
	int rc = carmy_begin(h, &call, &r);

	ck_assert_msg(rc == CARMY_REPLAY, "%s after reboot: %s", dn->rid,
		      outcome(rc));
	ck_assert_str_eq(r.execution_id, dn->exec);
	ck_assert_int_eq(r.status, want_status);
	ck_assert_int_eq(r.result_code, dn->code);
	ck_assert_uint_eq(r.result_len, dn->want_len);
	if (dn->want_len > 0)
		ck_assert_mem_eq(r.result, dn->result, dn->want_len);
	carmy_reservation_clear(&r);
}

static void expect_interrupted(carmy_t *h, const char *rid, const char *exec)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", rid);
	int rc = carmy_begin(h, &call, &r);

	ck_assert_msg(rc == CARMY_EUNCERTAIN &&
			      r.state == CARMY_STATE_INTERRUPTED,
		      "%s after reboot: %s (state %s)", rid, outcome(rc),
		      carmy_state_name(r.state));
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
}

/* ------------------------------------------------------------ reboot */

/* msgpack {"a":1,"b":2}, the same map in another key order, and another. */
static const uint8_t args_ab[] = { 0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02 };
static const uint8_t args_ba[] = { 0x82, 0xa1, 'b', 0x02, 0xa1, 'a', 0x01 };
static const uint8_t args_other[] = { 0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x03 };

#define NDONE 8
#define REBOOT_MAX_RESULT 256

static void make_done(struct done *dn)
{
	memset(dn, 0, NDONE * sizeof(*dn));
	for (int i = 0; i < NDONE; i++) {
		snprintf(dn[i].rid, sizeof(dn[i].rid), "done-%d", i);
		dn[i].status = statuses[i % 4];
		dn[i].len = (size_t)(i * 13 + 1);
		/* Zeros inside, so that nothing stops at a NUL. */
		for (size_t k = 0; k < dn[i].len; k++)
			dn[i].result[k] = (uint8_t)(k % 5 ? k * 7 + (size_t)i : 0);
	}
	dn[4].len = 0;				/* an empty result */
	dn[5].len = REBOOT_MAX_RESULT;		/* the largest allowed */
	for (size_t k = 0; k < dn[5].len; k++)
		dn[5].result[k] = (uint8_t)(255 - k);
	dn[6].len = REBOOT_MAX_RESULT + 1;	/* recorded as failed */
	dn[6].code = CARMY_ERESULT_TOO_LARGE;
	dn[7].args = args_ab;			/* its fingerprint matters */
	dn[7].args_len = sizeof(args_ab);
	for (int i = 0; i < NDONE; i++)
		dn[i].want_len = dn[i].code ? 0 : dn[i].len;
}

static void expect_fingerprint_kept(carmy_t *h, const struct done *dn)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = call_of("p", "s", dn->rid, args_ba,
					 sizeof(args_ba));
	int rc;

	/* The canonical fingerprint came back: key order does not matter. */
	ck_assert_int_eq(carmy_begin(h, &call, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, dn->exec);
	/* And other arguments under the same identity still conflict. */
	call.args = args_other;
	call.args_len = sizeof(args_other);
	rc = carmy_begin(h, &call, &r);
	ck_assert_msg(rc == CARMY_ECONFLICT, "other args after reboot: %s",
		      outcome(rc));
	ck_assert_int_eq(r.state, CARMY_STATE_COMPLETED);
	ck_assert_str_eq(r.execution_id, dn->exec);
	carmy_reservation_clear(&r);
}

START_TEST(test_acknowledged_results_survive_a_reboot)
{
	struct done dn[NDONE], again;
	struct carmy_call released = E2E_CALL("p", "s", "released");
	struct carmy_call held = E2E_CALL("p", "s", "held-here");
	struct carmy_call running = E2E_CALL("p", "s", "running");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation hr = CARMY_RESERVATION_INIT;
	char dir[128], spec[160], released_exec[CARMY_EXECUTION_ID_LEN + 1];
	const char *opts[16];
	struct e2e_child ch;

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	make_done(dn);
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	/* carmyd said so at HELLO: a begin of a new call waits for it. */
	ck_assert_int_eq(carmy_durable(c), 1);
	for (int i = 0; i < NDONE; i++)
		record(c, &dn[i]);
	/* Awake between our requests, carmyd took them from the slot. */
	if (spin_us != NULL)
		ck_assert_uint_ge(posts_taken(d.segment), 1);
	ck_assert_int_eq(carmy_begin(c, &released, &r), CARMY_RESERVED);
	strcpy(released_exec, r.execution_id);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	/* Two running: one in a process that dies with the machine, one on
	 * our own handle, which stays open across the reboot. */
	e2e_child_reserve(&ch, d.socket, &running, E2E_HOLD);
	ck_assert_int_eq(carmy_begin(c, &held, &hr), CARMY_RESERVED);

	e2e_kill9(&d);
	e2e_child_reap(&ch);
	lose_segment(&d);
	ck_assert(!segment_exists(d.segment));
	e2e_restart(&d, opts);
	/* The old handle belongs to a dead carmyd: it can record nothing. */
	ck_assert_int_ne(carmy_complete(c, &hr, CARMY_STATUS_COMPLETED, "x", 1),
			 0);
	carmy_close(c);
	c = e2e_connect(&d);

	for (int i = 0; i < NDONE; i++)
		expect_replay(c, &dn[i]);
	expect_fingerprint_kept(c, &dn[7]);
	expect_interrupted(c, "running", ch.exec);
	expect_interrupted(c, "held-here", hr.execution_id);
	/* The release was acknowledged: the identity is free again. */
	ck_assert_int_eq(carmy_begin(c, &released, &r), CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, released_exec);
	memset(&again, 0, sizeof(again));
	strcpy(again.rid, "released");
	strcpy(again.exec, r.execution_id);
	again.status = CARMY_STATUS_COMPLETED;
	again.len = again.want_len = 11;
	memcpy(again.result, "second life", 11);
	ck_assert_int_eq(carmy_complete(c, &r, again.status, again.result,
					again.len), 0);

	/* Once more: what was restored, and what came after, survive the
	 * next reboot too; the interrupted never come back to life. */
	e2e_kill9(&d);
	lose_segment(&d);
	e2e_restart(&d, opts);
	carmy_close(c);
	c = e2e_connect(&d);
	for (int i = 0; i < NDONE; i++)
		expect_replay(c, &dn[i]);
	expect_fingerprint_kept(c, &dn[7]);
	expect_interrupted(c, "running", ch.exec);
	expect_interrupted(c, "held-here", hr.execution_id);
	expect_replay(c, &again);
	/* And a new identity is served as usual. */
	{
		struct carmy_call fresh = E2E_CALL("p", "s", "fresh");

		ck_assert_int_eq(carmy_begin(c, &fresh, &r), CARMY_RESERVED);
		ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED,
						"f", 1), 0);
	}
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&hr);
	finish(dir);
}
END_TEST

/* The same, with the reservations posted in the slot (the completions are
 * sent, always). */
START_TEST(test_acknowledged_results_survive_a_reboot_posted)
{
	spin_us = "10000";
	test_acknowledged_results_survive_a_reboot_fn(_i);
	spin_us = NULL;
}
END_TEST

/* A release has the journal record it, then frees the identity in the
 * segment. After a carmyd restart the release reaches the carmyd that came
 * back, and a reboot after it finds the identity free; when no carmyd is
 * there, release says STORE_FAILED (free on this host, not in the journal)
 * instead of DISCONNECTED (which promises an uncertain entry), and a reboot
 * finds it interrupted: never free to run twice, never a release that
 * silently went missing. (A connection cut in the middle of the release is
 * sent again after reconnecting: soak --journal races that.) */
START_TEST(test_release_cut_off_by_a_restart_reaches_the_journal)
{
	struct carmy_call first = E2E_CALL("p", "s", "released-across");
	struct carmy_call second = E2E_CALL("p", "s", "released-alone");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char dir[128], spec[160], exec[CARMY_EXECUTION_ID_LEN + 1];
	const char *opts[16];

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	opts[7] = "30";		/* our owner id survives the restart */
	setenv("CARMY_RECONNECT_MS", "300", 1);
	e2e_start(&d, opts);
	c = e2e_connect(&d);

	/* carmyd restarts between the reservation and its release. */
	ck_assert_int_eq(carmy_begin(c, &first, &r), CARMY_RESERVED);
	e2e_kill9(&d);
	e2e_restart(&d, opts);
	ck_assert_int_eq(carmy_release(c, &r), 0);

	/* No carmyd at all when the release is made. */
	ck_assert_int_eq(carmy_begin(c, &second, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	e2e_kill9(&d);
	ck_assert_int_eq(carmy_release(c, &r), CARMY_ESTORE);
	carmy_close(c);
	c = NULL;

	lose_segment(&d);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &first, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	expect_interrupted(c, "released-alone", exec);
	carmy_reservation_clear(&r);
	finish(dir);
}
END_TEST

/* A child that calls id on socket, reporting on out: its execution id if
 * reserved (release: true), once go says so, release it; then begin's or
 * release's return code. */
static void releasing_child(const char *socket, const char *rid, bool release,
			    int go, int out)
{
	struct carmy_call call = E2E_CALL("p", "s", rid);
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	carmy_t *h = NULL;
	char b;
	int rc;

	if (carmy_connect(&h, socket) != 0 || read(go, &b, 1) != 1)
		_exit(2);
	rc = carmy_begin(h, &call, &r);
	if (release) {
		if (rc != CARMY_RESERVED ||
		    write(out, r.execution_id, sizeof(r.execution_id)) !=
			    (ssize_t)sizeof(r.execution_id) ||
		    read(go, &b, 1) != 1)
			_exit(3);
		rc = carmy_release(h, &r);
	}
	if (write(out, &rc, sizeof(rc)) != (ssize_t)sizeof(rc))
		_exit(4);
	carmy_close(h);
	_exit(0);
}

/* Wait until process pid sleeps waiting for carmyd (poll, ppoll or futex,
 * read from /proc/PID/syscall) or has written to the pipe fd. */
static void await_asleep(pid_t pid, int fd)
{
	char path[64], buf[64];

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	for (uint64_t t0 = harness_now_ns();; sched_yield()) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		FILE *f = fopen(path, "r");
		long nr = -1;

		if (f != NULL && fgets(buf, sizeof(buf), f) != NULL)
			nr = strtol(buf, NULL, 10);
		if (f != NULL)
			fclose(f);
		if (nr == 7 || nr == 271 || nr == 202 || poll(&p, 1, 0) > 0)
			return;
		ck_assert_msg(harness_now_ns() - t0 < 20000000000ull,
			      "process %d never slept waiting for carmyd",
			      (int)pid);
	}
}

/* One entry, given back by its owner while carmyd is held (SIGSTOP), and
 * a call of another process that comes meanwhile: the release is
 * recorded (0) and the identity is free after a reboot. (When the entry
 * was freed before carmyd heard of the release, the other call could take
 * it first, and carmyd could no longer tell that the RELEASE named a call
 * given back: STORE_FAILED, and the identity interrupted after a reboot,
 * though its tool never ran.) */
START_TEST(test_a_release_is_recorded_when_another_call_comes_at_once)
{
	struct carmy_call first = E2E_CALL("p", "s", "given-back");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char dir[128], spec[160], exec[CARMY_EXECUTION_ID_LEN + 1];
	int go[2][2], out[2][2], rc[2] = { -1, -1 };
	const char *opts[16];
	pid_t pid[2];

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "1", "256");
	e2e_start(&d, opts);
	fflush(NULL);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(pipe(go[i]), 0);
		ck_assert_int_eq(pipe(out[i]), 0);
		pid[i] = fork();
		ck_assert_int_ge(pid[i], 0);
		if (pid[i] == 0) {
			close(go[i][1]);
			close(out[i][0]);
			releasing_child(d.socket, i == 0 ? "given-back" :
							  "comes-at-once",
					i == 0, go[i][0], out[i][1]);
		}
		close(go[i][0]);
		close(out[i][1]);
	}
	ck_assert_int_eq(write(go[0][1], "g", 1), 1);
	ck_assert_int_eq(e2e_read_full(out[0][0], exec, sizeof(exec),
				       HARNESS_WAIT_MS), 0);

	e2e_sigstop(d.pid);
	ck_assert_int_eq(write(go[0][1], "g", 1), 1);
	await_asleep(pid[0], out[0][0]);
	ck_assert_int_eq(write(go[1][1], "g", 1), 1);
	await_asleep(pid[1], out[1][0]);
	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(e2e_read_full(out[i][0], &rc[i], sizeof(rc[i]),
					    HARNESS_WAIT_MS) == 0,
			      "child %d never answered", i);
		ck_assert_int_eq(harness_waitpid(pid[i], HARNESS_WAIT_MS), 0);
		close(go[i][1]);
		close(out[i][0]);
	}
	e2e_note("the other call: %s", carmy_errname(rc[1]));
	ck_assert_msg(rc[0] == 0, "release: %s", carmy_errname(rc[0]));

	/* The other call, if it got the entry, is uncertain after the
	 * reboot: room for it and one more. */
	e2e_kill9(&d);
	lose_segment(&d);
	journal_opts(opts, spec, sizeof(spec), dir, "2", "256");
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &first, &r), CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, exec);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	finish(dir);
}
END_TEST

/* A client that gives its entry back before it sends the RELEASE (a
 * libcarmy from before WIRE_F_RELEASE_FIRST) has it recorded too: free
 * after a reboot. */
START_TEST(test_a_release_sent_after_the_entry_was_given_back_is_recorded)
{
	struct carmy_call call = E2E_CALL("p", "s", "given-back-first");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char dir[128], spec[160], exec[CARMY_EXECUTION_ID_LEN + 1];
	uint8_t bytes[SHM_EXEC_LEN];
	const char *opts[16];
	struct shm_view v;

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	e2e_exec_bytes(exec, bytes);
	ck_assert_int_eq(shm_map(d.segment, true, &v), 0);
	ck_assert_int_eq(shm_release(&v, resv_entry(&r), resv_owner(&r)), 0);
	shm_unmap(&v);
	ck_assert_int_eq(e2e_raw_release(d.socket, resv_entry(&r), bytes), 0);
	carmy_reservation_clear(&r);

	e2e_kill9(&d);
	lose_segment(&d);
	e2e_restart(&d, opts);
	carmy_close(c);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, exec);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	finish(dir);
}
END_TEST

/* A RELEASE that names a running execution with an entry that is not its
 * own (out of the table, past its capacity, or one another call left when
 * it was released) is refused, and the journal keeps the execution: after
 * a reboot it is interrupted, not free to run again. Its own entry, where
 * it still runs, is refused too. */
START_TEST(test_a_release_naming_another_entry_forgets_nothing)
{
	struct carmy_call victim = E2E_CALL("p", "s", "victim");
	struct carmy_call other = E2E_CALL("p", "s", "released-before");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation o = CARMY_RESERVATION_INIT;
	char dir[128], spec[160];
	uint8_t exec[SHM_EXEC_LEN];
	const char *opts[16];
	uint32_t freed;

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &other, &o), CARMY_RESERVED);
	freed = resv_entry(&o);
	ck_assert_int_eq(carmy_release(c, &o), 0);
	ck_assert_int_eq(carmy_begin(c, &victim, &r), CARMY_RESERVED);
	ck_assert_uint_ne(resv_entry(&r), freed);
	e2e_exec_bytes(r.execution_id, exec);

	ck_assert_int_eq(e2e_raw_release(d.socket, UINT32_MAX, exec), CARMY_ENOT_RESERVED);
	ck_assert_int_eq(e2e_raw_release(d.socket, 64, exec), CARMY_ENOT_RESERVED);
	ck_assert_int_eq(e2e_raw_release(d.socket, freed, exec), CARMY_ENOT_RESERVED);
	ck_assert_int_eq(e2e_raw_release(d.socket, resv_entry(&r), exec),
			 CARMY_ENOT_RESERVED);

	e2e_kill9(&d);
	lose_segment(&d);
	e2e_restart(&d, opts);
	carmy_close(c);
	c = e2e_connect(&d);
	expect_interrupted(c, "victim", r.execution_id);
	/* The release made by its owner stands. */
	ck_assert_int_eq(carmy_begin(c, &other, &o), CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &o), 0);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&o);
	finish(dir);
}
END_TEST

/* An abandoned call (its client lost track of the tool) is uncertain at
 * once, and stays so across a restart on the kept segment and a reboot
 * from the journal alone: never free, never run again. */
START_TEST(test_an_abandoned_call_stays_uncertain_across_reboots)
{
	struct carmy_call call = E2E_CALL("p", "s", "abandoned");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char dir[128], spec[160], exec[CARMY_EXECUTION_ID_LEN + 1];
	const char *opts[16];

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_abandon(c, &r), 0);
	expect_interrupted(c, "abandoned", exec);
	e2e_stop(&d);
	e2e_restart(&d, opts);
	carmy_close(c);
	c = e2e_connect(&d);
	expect_interrupted(c, "abandoned", exec);
	e2e_kill9(&d);
	lose_segment(&d);
	e2e_restart(&d, opts);
	carmy_close(c);
	c = e2e_connect(&d);
	expect_interrupted(c, "abandoned", exec);
	finish(dir);
}
END_TEST

/* A plain restart keeps the segment: carmyd then has both, and what it
 * serves afterwards must be recorded in the journal as well, so that a
 * later reboot agrees with what clients saw. */
START_TEST(test_restart_on_the_kept_segment_then_reboot_agree)
{
	struct done a, e, c2;
	struct carmy_call rel = E2E_CALL("p", "s", "c");
	struct carmy_call held = E2E_CALL("p", "s", "d");
	struct carmy_call running = E2E_CALL("p", "s", "b");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation hr = CARMY_RESERVATION_INIT;
	char dir[128], spec[160];
	const char *opts[16];
	struct e2e_child ch;

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	memset(&a, 0, sizeof(a));
	strcpy(a.rid, "a");
	a.status = CARMY_STATUS_FAILED;
	a.len = a.want_len = 3;
	memcpy(a.result, "aaa", 3);
	e = a;
	strcpy(e.rid, "e");
	e.status = CARMY_STATUS_CANCELLED;
	c2 = a;
	strcpy(c2.rid, "c");
	c2.status = CARMY_STATUS_COMPLETED;
	memcpy(c2.result, "ccc", 3);

	e2e_start(&d, opts);
	c = e2e_connect(&d);
	record(c, &a);
	e2e_child_reserve(&ch, d.socket, &running, E2E_HOLD);
	ck_assert_int_eq(carmy_begin(c, &rel, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	carmy_close(c);
	c = NULL;

	/* carmyd alone dies; the segment stays. */
	e2e_kill9(&d);
	e2e_child_reap(&ch);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	expect_replay(c, &a);
	expect_interrupted(c, "b", ch.exec);
	record(c, &c2);		/* released before: free */
	record(c, &e);
	ck_assert_int_eq(carmy_begin(c, &held, &hr), CARMY_RESERVED);

	/* Now the machine. */
	e2e_kill9(&d);
	lose_segment(&d);
	e2e_restart(&d, opts);
	carmy_close(c);
	c = e2e_connect(&d);
	expect_replay(c, &a);
	expect_interrupted(c, "b", ch.exec);
	expect_replay(c, &c2);
	expect_replay(c, &e);
	expect_interrupted(c, "d", hr.execution_id);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&hr);
	finish(dir);
}
END_TEST

/*
 * A carmyd that gives up while loading its journal into a new segment (here
 * a --capacity too small for what the journal holds; a kill -9 at that
 * moment leaves the same) leaves a segment holding part of it. The next
 * carmyd on that segment must load everything again rather than take the
 * segment for the newer record: an identity it lacked would run again.
 */
#define NRUN 8

START_TEST(test_a_segment_left_half_loaded_is_loaded_again)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char dir[128], spec[160], rid[NRUN][16];
	char execs[NRUN][CARMY_EXECUTION_ID_LEN + 1];
	const char *opts[16], *small[16], *unsized[16];
	struct done dn[NDONE];

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	journal_opts(small, spec, sizeof(spec), dir, "4", "256");
	/* The segment's own capacity, as an operator restarting it would. */
	memcpy(unsized, opts + 2, 7 * sizeof(*opts));
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	make_done(dn);
	for (int i = 0; i < NDONE; i++)
		record(c, &dn[i]);
	for (int k = 0; k < NRUN; k++) {
		struct carmy_call call;

		snprintf(rid[k], sizeof(rid[k]), "run-%d", k);
		call = (struct carmy_call)E2E_CALL("p", "s", rid[k]);
		ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
		strcpy(execs[k], r.execution_id);
		carmy_reservation_clear(&r);
	}

	/* The machine goes, then comes back with too small a table. */
	e2e_kill9(&d);
	carmy_close(c);
	c = NULL;
	lose_segment(&d);
	fflush(NULL);
	ck_assert_msg(harness_restart(&d, small) != 0, "carmyd started with "
		      "--capacity 4 and %d executions to load", NDONE + NRUN);
	ck_assert_msg(segment_exists(d.segment), "no half-loaded segment");
	fflush(NULL);
	ck_assert_msg(harness_restart(&d, unsized) != 0,
		      "carmyd started on a segment holding part of its journal");

	/* Room for all: everything is back as it was. */
	lose_segment(&d);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	for (int i = 0; i < NDONE; i++)
		expect_replay(c, &dn[i]);
	for (int k = 0; k < NRUN; k++)
		expect_interrupted(c, rid[k], execs[k]);
	finish(dir);
}
END_TEST

/*
 * After a reboot, carmyd is started once with the wrong --store (memory):
 * it makes a segment and loads nothing into it. Started again with its
 * journal on that segment, it must load everything the journal holds: the
 * segment was loaded, but from another store, and a reservation the
 * journal holds would otherwise be free to run again.
 */
START_TEST(test_a_segment_loaded_from_another_store_is_loaded_again)
{
	static const char *const memory[] = { "--capacity", "64",
					      "--max-result", "256",
					      "--grace", "0", NULL };
	struct carmy_call running = E2E_CALL("p", "s", "running");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char dir[128], spec[160], exec[CARMY_EXECUTION_ID_LEN + 1];
	const char *opts[16];
	struct done dn[NDONE];

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	make_done(dn);
	for (int i = 0; i < NDONE; i++)
		record(c, &dn[i]);
	ck_assert_int_eq(carmy_begin(c, &running, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	carmy_reservation_clear(&r);
	e2e_kill9(&d);
	carmy_close(c);
	c = NULL;
	lose_segment(&d);

	e2e_restart(&d, memory);	/* the wrong store: a new segment */
	e2e_kill9(&d);
	e2e_restart(&d, opts);		/* the journal, on that segment */
	c = e2e_connect(&d);
	for (int i = 0; i < NDONE; i++)
		expect_replay(c, &dn[i]);
	expect_interrupted(c, "running", exec);
	finish(dir);
}
END_TEST

/* ------------------------------------------------------------ under load */

#define LOAD_WORKERS 6
#define LOAD_MAX_PER_WORKER 2000	/* under --capacity, with room */
#define LOAD_MIN_ACKED 300		/* acknowledged completions, at least */
#define LOAD_WAIT_MS 10000
#define LOG_REC 96			/* bytes per worker log record */

/* The worker's identity k and the result it records for it: both derived
 * from (w, k), so that the checker needs nothing but the log. */
static struct carmy_call load_call(char *p, char *rid, int w, unsigned k)
{
	snprintf(p, 8, "w%02d", w);
	snprintf(rid, 16, "r%06u", k);
	return E2E_CALL(p, "load", rid);
}

static size_t load_result(int w, unsigned k, uint8_t *buf)
{
	size_t len = ((size_t)w * 131 + (size_t)k * 17) % 300;

	for (size_t j = 0; j < len; j++)
		buf[j] = (uint8_t)(w * 31 + (int)k * 7 + (int)j);
	return len;
}

static int load_status(int w, unsigned k)
{
	return statuses[((unsigned)w + k) % 4];
}

/* One fixed-size record: "R w k exec", "C w k exec" or "E w k - rc ns". */
static void log_rec(int fd, char tag, int w, unsigned k, const char *exec,
		    int rc)
{
	char line[LOG_REC];
	int n = snprintf(line, sizeof(line), "%c %02d %06u %s %d %llu", tag, w,
			 k, exec, rc, (unsigned long long)harness_now_ns());

	if (n < 0 || n >= LOG_REC)
		_exit(2);
	memset(line + n, ' ', (size_t)(LOG_REC - n));
	line[LOG_REC - 1] = '\n';
	/* O_APPEND: once write() returned, the record is in the file,
	 * whatever happens to this process next. */
	if (write(fd, line, sizeof(line)) != (ssize_t)sizeof(line))
		_exit(3);
}

static void load_worker(int w, const char *socket, const char *logpath)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	uint8_t result[512];
	carmy_t *h = NULL;
	char p[8], rid[16];
	int fd, rc;

	/* Never outlive the test, whatever happens to it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		_exit(1);
	rc = carmy_connect(&h, socket);
	if (rc != 0) {
		log_rec(fd, 'E', w, 0, "-", rc);
		_exit(0);
	}
	for (unsigned k = 0; k < LOAD_MAX_PER_WORKER; k++) {
		struct carmy_call call = load_call(p, rid, w, k);
		size_t len;

		rc = carmy_begin(h, &call, &r);
		if (rc != CARMY_RESERVED) {
			log_rec(fd, 'E', w, k, "-", rc);
			break;
		}
		log_rec(fd, 'R', w, k, r.execution_id, 0);
		len = load_result(w, k, result);
		rc = carmy_complete(h, &r, load_status(w, k), result, len);
		if (rc != 0) {
			log_rec(fd, 'E', w, k, "-", rc);
			break;
		}
		log_rec(fd, 'C', w, k, r.execution_id, 0);
	}
	_exit(0);
}

/* What one worker's log says. */
struct wlog {
	unsigned reserved;	/* identities 0..reserved-1 acknowledged */
	unsigned completed;	/* identities 0..completed-1 acknowledged */
	char (*exec)[CARMY_EXECUTION_ID_LEN + 1];	/* by identity */
};

static void read_log(const char *path, int w, struct wlog *wl,
		     uint64_t kill_ns)
{
	size_t len;
	uint8_t *buf = read_file(path, &len);

	memset(wl, 0, sizeof(*wl));
	wl->exec = calloc(LOAD_MAX_PER_WORKER, sizeof(*wl->exec));
	ck_assert_ptr_nonnull(wl->exec);
	/* Records are written whole: a part of one would be a broken
	 * worker, not a torn write (the file outlives nothing here). */
	ck_assert_msg(len % LOG_REC == 0, "worker %d's log is %zu bytes", w,
		      len);
	for (size_t off = 0; off < len; off += LOG_REC) {
		char tag, exec[64];
		int ww, rc;
		unsigned k;
		unsigned long long ns;

		buf[off + LOG_REC - 1] = '\0';
		ck_assert_msg(sscanf((char *)buf + off, "%c %d %u %63s %d %llu",
				     &tag, &ww, &k, exec, &rc, &ns) == 6,
			      "worker %d: bad log record '%s'", w,
			      (char *)buf + off);
		ck_assert_int_eq(ww, w);
		switch (tag) {
		case 'R':
			/* Identities go in order, each reserved once. */
			ck_assert_uint_eq(k, wl->reserved);
			ck_assert_uint_eq(wl->completed, k);
			ck_assert(e2e_exec_id_valid(exec));
			strcpy(wl->exec[k], exec);
			wl->reserved++;
			break;
		case 'C':
			ck_assert_uint_eq(k, wl->completed);
			ck_assert_uint_eq(wl->reserved, k + 1);
			ck_assert_str_eq(exec, wl->exec[k]);
			wl->completed++;
			break;
		case 'E':
			/* Only carmyd's death may stop a worker. */
			ck_assert_msg(ns >= kill_ns, "worker %d failed at %u "
				      "before carmyd was killed: %s", w, k,
				      carmy_errname(rc));
			ck_assert_msg(rc == CARMY_EUNAVAILABLE ||
					      rc == CARMY_EDISCONNECTED,
				      "worker %d at %u: %s", w, k,
				      carmy_errname(rc));
			break;
		default:
			ck_abort_msg("worker %d: bad log tag %c", w, tag);
		}
	}
	free(buf);
}

static off_t logs_size(char logs[][160])
{
	off_t total = 0;

	for (int w = 0; w < LOAD_WORKERS; w++) {
		struct stat st;

		if (stat(logs[w], &st) == 0)
			total += st.st_size;
	}
	return total;
}

START_TEST(test_acknowledged_steps_survive_a_reboot_under_load)
{
	char dir[128], spec[160], logs[LOAD_WORKERS][160];
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct wlog wl[LOAD_WORKERS];
	pid_t pids[LOAD_WORKERS];
	const char *opts[16];
	uint64_t t0, kill_ns, deadline;
	unsigned us = 50, target;
	unsigned acked = 0, replayed_unacked = 0, uncertain = 0;
	unsigned inflight_free = 0, inflight_uncertain = 0, inflight_replay = 0;
	uint8_t result[512];

	rng_seed();
	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "16384", "512");
	e2e_start(&d, opts);
	for (int w = 0; w < LOAD_WORKERS; w++) {
		snprintf(logs[w], sizeof(logs[w]), "%s/worker-%d.log", dir, w);
		wl[w].exec = NULL;
	}
	/* Kill at a point that differs from run to run, past a floor that
	 * keeps the test from passing on too little. */
	target = LOAD_MIN_ACKED + 100 + (unsigned)(rng_next() % 800);

	t0 = harness_now_ns();
	fflush(NULL);
	for (int w = 0; w < LOAD_WORKERS; w++) {
		pids[w] = fork();
		ck_assert_int_ge(pids[w], 0);
		if (pids[w] == 0)
			load_worker(w, d.socket, logs[w]);
	}
	/* Wait for the logs to show about target completions (two records
	 * each): progress in the files is the event waited on. */
	deadline = t0 + (uint64_t)LOAD_WAIT_MS * 1000000u;
	while (logs_size(logs) < (off_t)target * 2 * LOG_REC &&
	       harness_now_ns() < deadline)
		backoff(&us);
	kill_ns = harness_now_ns();
	e2e_kill9(&d);
	/* The machine goes down: every client with it. */
	for (int w = 0; w < LOAD_WORKERS; w++) {
		kill(pids[w], SIGKILL);
		waitpid(pids[w], NULL, 0);
	}
	e2e_note("killed carmyd and %d workers after %.0f ms, logs at %lld "
		 "records", LOAD_WORKERS, e2e_ms_since(t0),
		 (long long)(logs_size(logs) / LOG_REC));
	ck_assert_msg(logs_size(logs) >= (off_t)target * 2 * LOG_REC,
		      "the workers made too little progress in %d ms",
		      LOAD_WAIT_MS);

	lose_segment(&d);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	for (int w = 0; w < LOAD_WORKERS; w++) {
		char p[8], rid[16];

		read_log(logs[w], w, &wl[w], kill_ns);
		for (unsigned k = 0; k < wl[w].reserved; k++) {
			struct carmy_call call = load_call(p, rid, w, k);
			size_t len = load_result(w, k, result);
			int rc = carmy_begin(c, &call, &r);

			if (k < wl[w].completed) {
				ck_assert_msg(rc == CARMY_REPLAY, "w%02d/%s: "
					      "acknowledged result lost: %s", w,
					      rid, outcome(rc));
				acked++;
			} else if (rc == CARMY_EUNCERTAIN) {
				ck_assert_msg(r.state == CARMY_STATE_INTERRUPTED,
					      "w%02d/%s: %s", w, rid,
					      carmy_state_name(r.state));
				ck_assert_str_eq(r.execution_id, wl[w].exec[k]);
				uncertain++;
				continue;
			} else {
				/* Durable, but the ack died on the way. */
				ck_assert_msg(rc == CARMY_REPLAY, "w%02d/%s: "
					      "acknowledged reservation "
					      "became %s", w, rid,
					      outcome(rc));
				replayed_unacked++;
			}
			ck_assert_str_eq(r.execution_id, wl[w].exec[k]);
			ck_assert_int_eq(r.status, load_status(w, k));
			ck_assert_int_eq(r.result_code, 0);
			ck_assert_uint_eq(r.result_len, len);
			if (len > 0)
				ck_assert_mem_eq(r.result, result, len);
		}
		/* A worker begins k + 1 only after logging k's completion.
		 * If its log ends with one, k + 1 may have been in flight
		 * when it died: never acknowledged, so anything but a wrong
		 * result will do. Past that, nothing was ever begun. */
		{
			unsigned k = wl[w].reserved;
			struct carmy_call call = load_call(p, rid, w, k);
			size_t len = load_result(w, k, result);
			int rc;

			if (wl[w].completed == wl[w].reserved) {
				rc = carmy_begin(c, &call, &r);
				if (rc == CARMY_RESERVED) {
					ck_assert_int_eq(carmy_release(c, &r),
							 0);
					inflight_free++;
				} else if (rc == CARMY_EUNCERTAIN) {
					ck_assert_int_eq(r.state,
							 CARMY_STATE_INTERRUPTED);
					inflight_uncertain++;
				} else {
					ck_assert_msg(rc == CARMY_REPLAY,
						      "w%02d/%s (in flight): "
						      "%s", w, rid,
						      carmy_errname(rc));
					ck_assert_int_eq(r.status,
							 load_status(w, k));
					ck_assert_uint_eq(r.result_len, len);
					if (len > 0)
						ck_assert_mem_eq(r.result,
								 result, len);
					inflight_replay++;
				}
				call = load_call(p, rid, w, ++k);
			}
			rc = carmy_begin(c, &call, &r);
			ck_assert_msg(rc == CARMY_RESERVED, "w%02d/%s, never "
				      "begun, is %s", w, rid,
				      carmy_errname(rc));
			ck_assert_int_eq(carmy_release(c, &r), 0);
		}
		free(wl[w].exec);
		wl[w].exec = NULL;
	}
	e2e_note("%u acknowledged results replayed; of the acknowledged "
		 "reservations without one, %u uncertain and %u replayed; in "
		 "flight: %u free, %u uncertain, %u replayed; %.0f ms in all",
		 acked, uncertain, replayed_unacked, inflight_free,
		 inflight_uncertain, inflight_replay, e2e_ms_since(t0));
	/* Not vacuous: there was real traffic when carmyd died. */
	ck_assert_uint_ge(acked, LOAD_MIN_ACKED);
	carmy_reservation_clear(&r);
	finish(dir);
}
END_TEST

/* ------------------------------------------------------------ torn tail */

#define TORN_N 40
/*
 * Every cut starts carmyd twice and reads the whole journal back each time:
 * about half a second natively, several seconds under a sanitiser (carmyd's
 * or the test's, see e2e_sanitised()) on a busy machine. So the sweep takes
 * TORN_CUTS random cuts natively and TORN_CUTS_SANITISED under a sanitiser,
 * besides the two ends, which are always cut. $CARMY_TORN_CUTS sets the
 * number of random cuts either way: `make check-torn-sweep` (tests/e2e/
 * local.mk) runs the full native sweep in any build, with Check's timeout
 * raised to match.
 */
#define TORN_CUTS 30
#define TORN_CUTS_SANITISED 3

/* How many random cuts: see above. carmyd is running (fill_journal's). */
static int torn_cuts(const struct carmyd_proc *p)
{
	const char *env = getenv("CARMY_TORN_CUTS");

	if (env != NULL && *env != '\0')
		return atoi(env) > 0 ? atoi(env) : 0;
	return e2e_sanitised(p) ? TORN_CUTS_SANITISED : TORN_CUTS;
}

static void make_torn_items(struct done *dn, int n)
{
	memset(dn, 0, (size_t)n * sizeof(*dn));
	for (int i = 0; i < n; i++) {
		snprintf(dn[i].rid, sizeof(dn[i].rid), "torn-%02d", i);
		dn[i].status = statuses[i % 4];
		/* Records of many sizes, so that the cuts fall everywhere. */
		dn[i].len = dn[i].want_len = (size_t)(i * 37) % 300;
		for (size_t k = 0; k < dn[i].len; k++)
			dn[i].result[k] = (uint8_t)(k + (size_t)i * 3 + 1);
	}
}

/*
 * Fill a journal in dir with n completed executions, one after the other
 * (so the journal holds them in this order), and stop carmyd cleanly.
 * Returns the size of an empty journal (its header), found by starting
 * carmyd once on the empty directory first: the format stays carmyd's.
 * *cuts (if not NULL) gets torn_cuts() of the carmyd that wrote it.
 */
static size_t fill_journal(const char *dir, struct done *dn, int n, int *cuts)
{
	char spec[160], path[160];
	const char *opts[16];
	struct stat st;

	journal_opts(opts, spec, sizeof(spec), dir, "256", "1024");
	journal_path(path, sizeof(path), dir);
	e2e_start(&d, opts);
	e2e_stop(&d);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_gt(st.st_size, 0);
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	for (int i = 0; i < n; i++)
		record(c, &dn[i]);
	if (cuts != NULL)
		*cuts = torn_cuts(&d);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
	memset(&d, 0, sizeof(d));
	return (size_t)st.st_size;
}

/* Where the records end: the zeros carmyd writes ahead are the clean end.
 * Records are 8-byte aligned, so a checksum that happens to end in zero
 * bytes is still counted whole. */
static size_t data_end(const uint8_t *buf, size_t len)
{
	while (len > 0 && buf[len - 1] == 0)
		len--;
	return (len + 7) / 8 * 8;
}

enum cut_seen { SEEN_REPLAY, SEEN_UNCERTAIN, SEEN_FREE };

/* Start carmyd on the journal in dir and classify every item; what must
 * hold of a clean prefix is asserted here. Free items are then recorded
 * anew (result "again <i>"), so that the next start can check that records
 * written after a cut survive. Returns how many items were known. */
static int check_prefix(const char *dir, struct done *dn, int n,
			enum cut_seen *seen, size_t cut)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char spec[160];
	const char *opts[16];
	int known = 0;

	journal_opts(opts, spec, sizeof(spec), dir, "256", "1024");
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	for (int i = 0; i < n; i++) {
		struct carmy_call call = E2E_CALL("p", "s", dn[i].rid);
		int rc = carmy_begin(c, &call, &r);

		if (rc == CARMY_REPLAY) {
			/* Only what was there, exactly as it was. */
			ck_assert_msg(i == 0 || seen[i - 1] == SEEN_REPLAY,
				      "cut at %zu: %s replays after a gap",
				      cut, dn[i].rid);
			ck_assert_str_eq(r.execution_id, dn[i].exec);
			ck_assert_int_eq(r.status, dn[i].status);
			ck_assert_int_eq(r.result_code, 0);
			ck_assert_uint_eq(r.result_len, dn[i].len);
			if (dn[i].len > 0)
				ck_assert_mem_eq(r.result, dn[i].result,
						 dn[i].len);
			seen[i] = SEEN_REPLAY;
			known++;
		} else if (rc == CARMY_EUNCERTAIN) {
			/* Its reservation survived the cut, its result not:
			 * only ever the one right after the replays. */
			ck_assert_msg(i == 0 || seen[i - 1] == SEEN_REPLAY,
				      "cut at %zu: %s uncertain after a gap",
				      cut, dn[i].rid);
			ck_assert_int_eq(r.state, CARMY_STATE_INTERRUPTED);
			ck_assert_str_eq(r.execution_id, dn[i].exec);
			seen[i] = SEEN_UNCERTAIN;
			known++;
		} else {
			ck_assert_msg(rc == CARMY_RESERVED, "cut at %zu: %s is "
				      "%s", cut, dn[i].rid, outcome(rc));
			ck_assert_str_ne(r.execution_id, dn[i].exec);
			seen[i] = SEEN_FREE;
			ck_assert_int_eq(carmy_complete(c, &r,
							CARMY_STATUS_COMPLETED,
							"again", 5), 0);
		}
	}
	carmy_reservation_clear(&r);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
	memset(&d, 0, sizeof(d));
	return known;
}

/* Start again on the same journal: the prefix as before, and what was
 * recorded after the cut as well. */
static void check_after_cut(const char *dir, const struct done *dn, int n,
			    const enum cut_seen *seen, size_t cut)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char spec[160];
	const char *opts[16];

	journal_opts(opts, spec, sizeof(spec), dir, "256", "1024");
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	for (int i = 0; i < n; i++) {
		struct carmy_call call = E2E_CALL("p", "s", dn[i].rid);
		int rc = carmy_begin(c, &call, &r);

		switch (seen[i]) {
		case SEEN_REPLAY:
			ck_assert_msg(rc == CARMY_REPLAY, "cut at %zu, second "
				      "start: %s is %s", cut, dn[i].rid,
				      outcome(rc));
			ck_assert_str_eq(r.execution_id, dn[i].exec);
			ck_assert_uint_eq(r.result_len, dn[i].len);
			break;
		case SEEN_UNCERTAIN:
			ck_assert_msg(rc == CARMY_EUNCERTAIN, "cut at %zu, "
				      "second start: %s is %s", cut, dn[i].rid,
				      outcome(rc));
			ck_assert_str_eq(r.execution_id, dn[i].exec);
			break;
		case SEEN_FREE:
			ck_assert_msg(rc == CARMY_REPLAY, "cut at %zu: %s, "
				      "recorded after the cut, is %s", cut,
				      dn[i].rid, outcome(rc));
			ck_assert_uint_eq(r.result_len, 5);
			ck_assert_mem_eq(r.result, "again", 5);
			break;
		}
	}
	carmy_reservation_clear(&r);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
	memset(&d, 0, sizeof(d));
}

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	return x < y ? -1 : x > y;
}

START_TEST(test_torn_journal_restores_a_clean_prefix)
{
	static struct done dn[TORN_N];
	enum cut_seen seen[TORN_N];
	size_t *cuts, head, end, len;
	char dir[128], path[160];
	uint8_t *orig;
	int last_known[2] = { 0, 0 }, ncuts;
	uint64_t t0 = harness_now_ns();

	rng_seed();
	make_torn_items(dn, TORN_N);
	new_dir(dir, sizeof(dir));
	head = fill_journal(dir, dn, TORN_N, &ncuts);
	ncuts += 2;
	journal_path(path, sizeof(path), dir);
	orig = read_file(path, &len);
	end = data_end(orig, len);
	ck_assert_msg(head < end && end <= len, "header %zu, records end at "
		      "%zu, file %zu bytes", head, end, len);
	e2e_note("journal: %zu-byte header, records end at byte %zu, file "
		 "%zu bytes; %d cuts", head, end, len, ncuts);

	/* The two ends, and random bytes in between. */
	cuts = calloc((size_t)ncuts, sizeof(*cuts));
	ck_assert_ptr_nonnull(cuts);
	cuts[0] = head;
	cuts[1] = end;
	for (int i = 2; i < ncuts; i++)
		cuts[i] = head + (size_t)(rng_next() % (end - head));
	qsort(cuts, (size_t)ncuts, sizeof(cuts[0]), cmp_size);

	for (int i = 0; i < ncuts; i++) {
		char cdir[128], cpath[160], jdir[160];
		/* Keep the file's size with zeros after the cut (the
		 * sectors that never reached the disk: a disk writes a
		 * 512-byte sector whole or not at all, so these cuts fall
		 * on sector boundaries), with a file as long as the one
		 * carmyd wrote, or 64 KiB longer. */
		bool zeros = i % 2;
		size_t at = cuts[i];
		int known;

		if (at != end)
			at = at / 512 * 512 < head ? head : at / 512 * 512;
		new_dir(cdir, sizeof(cdir));
		snprintf(jdir, sizeof(jdir), "%s/j", cdir);
		ck_assert_int_eq(mkdir(jdir, 0700), 0);
		journal_path(cpath, sizeof(cpath), cdir);
		write_file(cpath, orig, at, zeros ? end + 65536 : len);
		known = check_prefix(cdir, dn, TORN_N, seen, at);
		/* A longer journal never knows less. */
		ck_assert_msg(known >= last_known[zeros], "cut at %zu knows %d "
			      "executions, a shorter cut knew %d", at,
			      known, last_known[zeros]);
		last_known[zeros] = known;
		if (cuts[i] == head)
			ck_assert_int_eq(known, 0);
		if (cuts[i] == end)
			ck_assert_msg(known == TORN_N && seen[TORN_N - 1] ==
					      SEEN_REPLAY,
				      "the whole journal restored only %d",
				      known);
		check_after_cut(cdir, dn, TORN_N, seen, at);
		e2e_rm_rf(cdir);
	}
	e2e_note("%d cuts checked in %.0f ms", ncuts, e2e_ms_since(t0));
	/* Cut short instead (the file ends at the cut): no crash leaves
	 * that, since the file grows ahead of its records and never
	 * shrinks. carmyd refuses it, naming the byte. */
	for (int i = 0; i < 3; i++) {
		char cdir[128], cpath[160], jdir[160], spec[160];
		const char *opts[16];
		size_t at = i == 0 ? end : i == 1 ? end - 5 : cuts[ncuts - 2];

		if (at <= head)
			continue;
		new_dir(cdir, sizeof(cdir));
		snprintf(jdir, sizeof(jdir), "%s/j", cdir);
		ck_assert_int_eq(mkdir(jdir, 0700), 0);
		journal_path(cpath, sizeof(cpath), cdir);
		write_file(cpath, orig, at, at);
		journal_opts(opts, spec, sizeof(spec), cdir, "256", "1024");
		expect_refusal(opts, 0, "damaged at byte");
		e2e_rm_rf(cdir);
	}
	free(cuts);
	free(orig);
	e2e_rm_rf(dir);
}
END_TEST

/* ------------------------------------------------------------ refusals */

/*
 * Run carmyd directly (the harness asserts that it comes up) with a fresh
 * socket and segment and these options. It must exit with a non-zero
 * status (want_exit, if > 0) without ever getting ready, say want_log on
 * stderr, and leave no segment and no socket behind.
 */
static void expect_refusal(const char *const *extra, int want_exit,
			   const char *want_log)
{
	char prog[256], sdir[128], sock[160], seg[64], logp[160], out[512];
	const char *argv[32];
	char first[200];
	const char *what = extra[0];
	size_t have = 0, loglen;
	uint64_t deadline;
	uint8_t *errlog;
	int n = 0, p[2], lfd, st;
	pid_t pid;

	/* Name the refusal by its --store value in the notes. */
	for (int i = 0; extra[i] != NULL; i++)
		if (strcmp(extra[i], "--store") == 0 && extra[i + 1] != NULL)
			what = extra[i + 1];
	new_dir(sdir, sizeof(sdir));
	snprintf(sock, sizeof(sock), "%s/carmyd.sock", sdir);
	snprintf(logp, sizeof(logp), "%s/stderr", sdir);
	snprintf(seg, sizeof(seg), "/carmy-test-jnl.%d.%u", (int)getpid(),
		 dir_seq++);
	argv[n++] = harness_path("daemon/carmyd", prog, sizeof(prog));
	argv[n++] = "--foreground";
	argv[n++] = "--transient";
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--segment";
	argv[n++] = seg;
	for (int i = 0; extra[i] != NULL && n < 31; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	lfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		dup2(lfd, STDERR_FILENO);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	close(lfd);
	/* Its stdout ends when it exits; a ready line means it started. */
	deadline = harness_now_ns() + 10000ull * 1000000u;
	for (;;) {
		int64_t left = (int64_t)(deadline - harness_now_ns()) / 1000000;
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		ssize_t got;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			break;
		got = read(p[0], out + have, sizeof(out) - 1 - have);
		if (got <= 0)
			break;
		have += (size_t)got;
		out[have] = '\0';
		if (strstr(out, "carmyd ready") != NULL || have == sizeof(out) - 1)
			break;
	}
	close(p[0]);
	out[have] = '\0';
	/* Started after all: no need to wait for an exit that won't come. */
	if (strstr(out, "carmyd ready") != NULL)
		kill(pid, SIGKILL);
	st = harness_waitpid(pid, HARNESS_WAIT_MS);
	if (st == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	errlog = read_file(logp, &loglen);
	snprintf(first, sizeof(first), "%.*s",
		 (int)strcspn((char *)errlog, "\n"), (char *)errlog);
	e2e_note("refused (%s): %s", what, first);
	if (segment_exists(seg))
		shm_unlink(seg);
	ck_assert_msg(st != -1 && strstr(out, "carmyd ready") == NULL,
		      "carmyd started with --store %s", what);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0,
		      "carmyd --store %s: wait status %#x", what, st);
	if (want_exit > 0)
		ck_assert_int_eq(WEXITSTATUS(st), want_exit);
	ck_assert_msg(strstr((char *)errlog, want_log) != NULL,
		      "carmyd's log does not say '%s': %s", want_log,
		      (char *)errlog);
	ck_assert_msg(!segment_exists(seg), "a refused carmyd left segment %s",
		      seg);
	ck_assert_msg(access(sock, F_OK) != 0, "a refused carmyd left its "
		      "socket %s", sock);
	free(errlog);
	e2e_rm_rf(sdir);
}

START_TEST(test_damage_in_the_middle_is_refused_not_cut)
{
	static struct done dn[TORN_N];
	size_t head, end, len;
	char dir[128], path[160];
	uint8_t *orig;
	size_t flips[4];

	make_torn_items(dn, TORN_N);
	new_dir(dir, sizeof(dir));
	head = fill_journal(dir, dn, TORN_N, NULL);
	journal_path(path, sizeof(path), dir);
	orig = read_file(path, &len);
	end = data_end(orig, len);
	ck_assert(head < end);
	/* Inside the first record, and further in: each has many later
	 * batches (one completion at a time, so each record is a batch). */
	flips[0] = head + 1;
	flips[1] = head + 17;
	flips[2] = head + (end - head) / 4;
	flips[3] = head + (end - head) / 2;
	for (int i = 0; i < 4; i++) {
		char cdir[128], cpath[160], spec[160], jdir[160];
		const char *opts[16];
		uint8_t *after;
		size_t alen;

		new_dir(cdir, sizeof(cdir));
		snprintf(jdir, sizeof(jdir), "%s/j", cdir);
		ck_assert_int_eq(mkdir(jdir, 0700), 0);
		journal_path(cpath, sizeof(cpath), cdir);
		orig[flips[i]] ^= 0x5a;
		write_file(cpath, orig, end, len);
		journal_opts(opts, spec, sizeof(spec), cdir, "256", "1024");
		expect_refusal(opts, 0, "damaged");
		/* Refused as it was: not one byte cut or written. */
		after = read_file(cpath, &alen);
		ck_assert_uint_eq(alen, len);
		ck_assert_msg(memcmp(after, orig, len) == 0,
			      "a refused journal was changed");
		free(after);
		orig[flips[i]] ^= 0x5a;
		e2e_rm_rf(cdir);
	}
	/* Undamaged, the same journal starts, and everything replays. */
	{
		char cdir[128], cpath[160], jdir[160];
		enum cut_seen seen[TORN_N];

		new_dir(cdir, sizeof(cdir));
		snprintf(jdir, sizeof(jdir), "%s/j", cdir);
		ck_assert_int_eq(mkdir(jdir, 0700), 0);
		journal_path(cpath, sizeof(cpath), cdir);
		write_file(cpath, orig, end, len);
		ck_assert_int_eq(check_prefix(cdir, dn, TORN_N, seen, len),
				 TORN_N);
		e2e_rm_rf(cdir);
	}
	free(orig);
	e2e_rm_rf(dir);
}
END_TEST

START_TEST(test_bad_store_values_are_refused_without_a_segment)
{
	static const char *const nonsense[] = { "--store", "nonsense", NULL };
	static const char *const empty[] = { "--store", "journal:", NULL };
	static const char *const forbidden[] = {
		"--store", "journal:/proc/forbidden/x", NULL };

	expect_refusal(nonsense, 64, "--store");
	expect_refusal(empty, 0, "journal needs a directory");
	expect_refusal(forbidden, 0, "/proc/forbidden/x");
}
END_TEST

START_TEST(test_unusable_journal_is_refused_without_a_segment)
{
	char dir[128], path[160], spec[200], jdir[160];
	const char *opts[16], *argv[3] = { "--store", spec, NULL };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "still-served");
	static const uint8_t junk[4096] = { 'n', 'o', 't', ' ', 'a', ' ',
					    'j', 'o', 'u', 'r', 'n', 'a', 'l' };
	int fd;

	/* A file where the directory should be. */
	new_dir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/file", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(spec, sizeof(spec), "journal:%s", path);
	expect_refusal(argv, 0, "cannot open journal directory");

	/* Something else in the journal's place. */
	snprintf(jdir, sizeof(jdir), "%s/j", dir);
	ck_assert_int_eq(mkdir(jdir, 0700), 0);
	journal_path(path, sizeof(path), dir);
	write_file(path, junk, sizeof(junk), sizeof(junk));
	snprintf(spec, sizeof(spec), "journal:%s/j", dir);
	expect_refusal(argv, 0, "not a Carmy journal");

	/* Shorter than a header. */
	write_file(path, junk, 10, 10);
	expect_refusal(argv, 0, "shorter than its header");

	/* A journal another carmyd is using: the second is refused, the
	 * first goes on serving. */
	ck_assert_int_eq(unlink(path), 0);
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	e2e_start(&d, opts);
	expect_refusal(argv, 0, "in use by another carmyd");
	ck_assert(e2e_alive(&d));
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok",
					2), 0);
	carmy_reservation_clear(&r);
	finish(dir);
}
END_TEST

/*
 * A client waiting for carmyd's answer sleeps once per request. Asleep in
 * a blocking recv(), it was also woken when carmyd read its request (the
 * send space that frees wakes every sleeper on the socket), only to sleep
 * again: two sleeps per request, four per cycle, and with 64 clients on a
 * journal that spurious wake-up cost a quarter of the throughput (README,
 * Performance). Here carmyd does not poll (--spin-us 0), so it reads each
 * request after waking to it, by when the client is asleep: the moment
 * the old wake-up came. The count is of the calling thread's voluntary
 * context switches, which only its own waits make.
 */
#define SLEEP_CYCLES 200

START_TEST(test_a_client_sleeps_once_per_answer)
{
	char dir[128], spec[160], rid[32];
	const char *opts[16];
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct rusage r0, r1;
	long sleeps;

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "1000", "256");
	opts[8] = "--spin-us";
	opts[9] = "0";
	opts[10] = NULL;
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(getrusage(RUSAGE_THREAD, &r0), 0);
	for (int i = 0; i < SLEEP_CYCLES; i++) {
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "sleep-%d", i);
		call = E2E_CALL("p", "s", rid);
		ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
		ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED,
						"ok", 2), 0);
	}
	ck_assert_int_eq(getrusage(RUSAGE_THREAD, &r1), 0);
	sleeps = r1.ru_nvcsw - r0.ru_nvcsw;
	e2e_note("%d journal cycles (two answers each): %ld sleeps",
		 SLEEP_CYCLES, sleeps);
	ck_assert_msg(sleeps <= 2 * SLEEP_CYCLES + SLEEP_CYCLES / 2,
		      "%ld sleeps for %d answers", sleeps, 2 * SLEEP_CYCLES);
	carmy_reservation_clear(&r);
	finish(dir);
}
END_TEST

/*
 * A durable store's success is told in the connection's ack slot
 * (shm_ack), where a carmyd that dies can say nothing. A client waiting
 * there for the answer to its completion when carmyd is killed finds out
 * from the socket (it looks every CARMY_ACK_CHECK_MS), reconnects to the
 * carmyd that comes back, sends the completion again and has it recorded:
 * it does not sleep on the word for ever.
 */
/* The ack slot whose client sleeps on it, waited for up to 20 s: the one
 * client here that awaits a durable answer. */
static uint32_t sleeping_slot(const struct shm_view *v)
{
	for (uint64_t t0 = harness_now_ns();; sched_yield()) {
		for (uint32_t i = 0; i < SHM_ACK_SLOTS; i++)
			if ((__atomic_load_n(&v->acks[i].ak_word,
					     __ATOMIC_ACQUIRE) & 3) == 2)
				return i;
		ck_assert_msg(harness_now_ns() - t0 < 20000000000ull,
			      "no client slept on its slot");
	}
}

struct completer {
	struct carmy_reservation *r;
	int rc;
};

static void *complete_in_thread(void *arg)
{
	struct completer *k = arg;

	k->rc = carmy_complete(c, k->r, CARMY_STATUS_COMPLETED, "late", 4);
	return NULL;
}

START_TEST(test_a_client_waiting_in_its_slot_outlives_carmyd)
{
	struct carmy_call call = E2E_CALL("p", "s", "acked-across");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char dir[128], spec[160];
	const char *opts[16];
	struct completer k = { .r = &r };
	struct shm_view v;
	pthread_t t;

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "64", "256");
	opts[7] = "30";		/* our owner id survives the restart */
	setenv("CARMY_RECONNECT_MS", "10000", 1);
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);

	/* carmyd cannot answer; the client goes to sleep on its slot. */
	e2e_sigstop(d.pid);
	ck_assert_int_eq(pthread_create(&t, NULL, complete_in_thread, &k), 0);
	(void)sleeping_slot(&v);
	shm_unmap(&v);
	e2e_kill9(&d);
	e2e_restart(&d, opts);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(k.rc, 0);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
	ck_assert_uint_eq(r.result_len, 4);
	ck_assert_int_eq(memcmp(r.result, "late", 4), 0);
	carmy_reservation_clear(&r);
	finish(dir);
}
END_TEST

/* The slot where a request is posted (state READY), waited for. */
static uint32_t posted_slot(const struct shm_view *v)
{
	for (uint64_t t0 = harness_now_ns();; sched_yield()) {
		for (uint32_t i = 0; i < SHM_ACK_SLOTS; i++)
			if ((__atomic_load_n(&v->acks[i].ak_post,
					     __ATOMIC_ACQUIRE) & 3) == 1)
				return i;
		ck_assert_msg(harness_now_ns() - t0 < 20000000000ull,
			      "no client posted in its slot");
	}
}

/* Wait until the request posted in slot is taken, by carmyd or back by its
 * client (the post word leaves READY). */
static void await_post_gone(const struct shm_view *v, uint32_t slot,
			    const char *who)
{
	for (uint64_t t0 = harness_now_ns();
	     (__atomic_load_n(&v->acks[slot].ak_post, __ATOMIC_ACQUIRE) & 3) ==
	     1;
	     sched_yield())
		ck_assert_msg(harness_now_ns() - t0 < 20000000000ull,
			      "%s never took the post", who);
}

/* A journal carmyd with threads event loops, and our handle c on it. */
static void start_posting(char *dir, size_t dsize, char *spec, size_t ssize,
			  const char *opts[16], const char *threads)
{
	new_dir(dir, dsize);
	journal_opts(opts, spec, ssize, dir, "64", "256");
	opts[8] = threads ? "--threads" : NULL;
	opts[9] = threads;
	opts[10] = NULL;
	e2e_start(&d, opts);
	c = e2e_connect(&d);
}

/* A begin on another thread of ours, which waits for carmyd. */
struct reserver {
	const struct carmy_call *call;
	struct carmy_reservation *r;
	int rc;
};

static void *reserve_in_thread(void *arg)
{
	struct reserver *k = arg;

	k->rc = carmy_begin(c, k->call, k->r);
	return NULL;
}

/* Stop carmyd with every bell saying "awake" and have a thread of ours
 * begin k->call: it reserves in the table and posts the reservation for
 * carmyd to record. Returns its slot. */
static uint32_t post_to_stopped(struct shm_view *v, pthread_t *t,
				struct reserver *k)
{
	ck_assert_int_eq(shm_map(d.segment, true, v), 0);
	e2e_sigstop(d.pid);
	for (uint32_t i = 0; i < SHM_BELLS; i++)
		__atomic_store_n(&v->bells[i].bl_awake, 1, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(pthread_create(t, NULL, reserve_in_thread, k), 0);
	return posted_slot(v);
}

/* Let carmyd go on: the reservation post_to_stopped() began is recorded,
 * and its call completes and replays as any other. */
static void resume_posted(struct shm_view *v, pthread_t t,
			  struct reserver *k)
{
	struct carmy_reservation again = CARMY_RESERVATION_INIT;

	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(k->rc, CARMY_RESERVED);
	shm_unmap(v);
	ck_assert_int_eq(carmy_complete(c, k->r, CARMY_STATUS_COMPLETED, "late",
					4), 0);
	ck_assert_int_eq(carmy_begin(c, k->call, &again), CARMY_REPLAY);
	ck_assert_uint_eq(again.result_len, 4);
	ck_assert_int_eq(memcmp(again.result, "late", 4), 0);
	carmy_reservation_clear(&again);
}

/*
 * A bell that says "awake" wrongly (written over, or left so by a carmyd
 * stopped while awake) costs a request CARMY_ACK_CHECK_MS, never its
 * answer: the client takes its post back and sends it. carmyd is stopped
 * while this happens, so only the client can have taken the post back.
 */
START_TEST(test_a_post_nobody_takes_is_sent_instead)
{
	struct carmy_call call = E2E_CALL("p", "s", "posted-to-no-one");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char dir[128], spec[160];
	const char *opts[16];
	struct reserver k = { .call = &call, .r = &r };
	struct shm_view v;
	uint32_t slot;
	pthread_t t;

	setenv("CARMY_ACK_CHECK_MS", "50", 1);
	start_posting(dir, sizeof(dir), spec, sizeof(spec), opts, NULL);
	slot = post_to_stopped(&v, &t, &k);
	await_post_gone(&v, slot, "the client");
	ck_assert_int_eq(v.acks[slot].ak_post & 3, 0);	/* taken back */
	resume_posted(&v, t, &k);
	carmy_reservation_clear(&r);
	finish(dir);
}
END_TEST

/*
 * A post torn by another writer (here the test, standing for a client
 * stalled since its connection was dropped and its slot handed on) is not
 * acted on, and does not cost its client the call: carmyd asks it to send
 * the request instead (RESEND), and the reservation stands as it was made
 * (acted on, the torn execution id would have been refused). One loop,
 * whose 100 ms tick wakes it after SIGCONT, and a client that waits in its
 * slot longer than the test: only carmyd can take the post.
 */
START_TEST(test_a_torn_post_is_sent_again_not_acted_on)
{
	struct carmy_call call = E2E_CALL("p", "s", "torn-post");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char dir[128], spec[160];
	const char *opts[16];
	struct reserver k = { .call = &call, .r = &r };
	struct shm_view v;
	uint32_t slot;
	pthread_t t;

	setenv("CARMY_ACK_CHECK_MS", "600000", 1);
	start_posting(dir, sizeof(dir), spec, sizeof(spec), opts, "1");
	slot = post_to_stopped(&v, &t, &k);
	v.acks[slot].ak_exec[5] ^= 1;	/* another execution's, or none */
	resume_posted(&v, t, &k);
	/* The connection is whole: the next call is served on it. */
	call.request_id = "after-torn";
	call.request_id_len = strlen(call.request_id);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok", 2),
			 0);
	carmy_reservation_clear(&r);
	finish(dir);
}
END_TEST

/*
 * A request posted in a connection's slot by someone other than its client
 * (any process that may write the segment can) is not acted on: the
 * client's word does not await it. Here a reservation of the client's own,
 * posted again, whole and of the slot's generation, while the client waits
 * for nothing: acted on, its answer would wait on the socket and be read
 * as the answer to the client's next request (the release below).
 */
START_TEST(test_a_post_its_client_does_not_await_is_dropped)
{
	struct carmy_call call = E2E_CALL("p", "s", "forged-post");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct shm_post p = { .type = WIRE_RESERVE };
	char dir[128], spec[160];
	const char *opts[16];
	struct shm_view v;
	uint32_t slot = SHM_ACK_SLOTS, gen;

	start_posting(dir, sizeof(dir), spec, sizeof(spec), opts, "1");
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(shm_map(d.segment, true, &v), 0);
	for (uint32_t i = 0; i < SHM_ACK_SLOTS; i++)
		if (v.acks[i].ak_post != 0)
			slot = i;	/* the one connection's */
	ck_assert_uint_lt(slot, SHM_ACK_SLOTS);
	gen = __atomic_load_n(&v.acks[slot].ak_post, __ATOMIC_ACQUIRE) >> 2;
	p.entry = resv_entry(&r);
	e2e_exec_bytes(r.execution_id, p.exec);
	e2e_post_awake(&v, slot, 0, gen, &p);
	/* The loop takes it (at its tick at the latest). */
	await_post_gone(&v, slot, "carmyd");
	shm_unmap(&v);
	/* The client's next request gets its own answer. */
	ck_assert_int_eq(carmy_release(c, &r), 0);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok", 2),
			 0);
	carmy_reservation_clear(&r);
	finish(dir);
}
END_TEST

/*
 * A completion told in the owner's slot, which looks only after the entry
 * was purged and taken by another call: the answer is the connection's,
 * not the entry's, and carmy_complete returns 0 (it waited for a reply on
 * the socket that never comes when the answer was kept in the entry). The
 * owner is stopped (SIGSTOP) between going to sleep on its slot and
 * reading carmyd's answer.
 */
static void gone_child(const char *socket, int go, int out)
{
	struct carmy_call call = E2E_CALL("p", "s", "purged-under-me");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	carmy_t *h = NULL;
	char b;
	int rc;

	if (carmy_connect(&h, socket) != 0 ||
	    carmy_begin(h, &call, &r) != CARMY_RESERVED ||
	    write(out, r.execution_id, sizeof(r.execution_id)) !=
		    (ssize_t)sizeof(r.execution_id) ||
	    read(go, &b, 1) != 1)
		_exit(2);
	rc = carmy_complete(h, &r, CARMY_STATUS_COMPLETED, "r", 1);
	if (write(out, &rc, sizeof(rc)) != (ssize_t)sizeof(rc))
		_exit(3);
	carmy_close(h);
	_exit(0);
}

START_TEST(test_a_completion_whose_entry_was_purged_before_it_looked)
{
	char dir[128], spec[160], exec[CARMY_EXECUTION_ID_LEN + 1], ctl[256];
	char cmd[768];
	const char *opts[16];
	uint8_t bytes[SHM_EXEC_LEN];
	int go[2], out[2], rc = -1, status;
	struct shm_view v;
	uint32_t e = UINT32_MAX, slot;
	struct shm_entry *en;
	bool taken = false;
	pid_t pid;

	new_dir(dir, sizeof(dir));
	journal_opts(opts, spec, sizeof(spec), dir, "4", "256");
	opts[8] = NULL;
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(out), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(go[1]);
		close(out[0]);
		gone_child(d.socket, go[0], out[1]);
	}
	close(go[0]);
	close(out[1]);
	ck_assert_int_eq(e2e_read_full(out[0], exec, sizeof(exec),
				       HARNESS_WAIT_MS), 0);
	e2e_exec_bytes(exec, bytes);
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	for (uint32_t i = 0; i < v.geo.capacity; i++)
		if (memcmp(shm_entry_at(&v, i)->en_exec, bytes,
			   SHM_EXEC_LEN) == 0)
			e = i;
	ck_assert_uint_ne(e, UINT32_MAX);
	en = shm_entry_at(&v, e);

	/* carmyd held, the owner sends its completion and sleeps on its
	 * slot; the owner held, carmyd answers there. */
	e2e_sigstop(d.pid);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	slot = sleeping_slot(&v);
	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	ck_assert_int_eq(waitpid(pid, &status, WUNTRACED), pid);
	ck_assert(WIFSTOPPED(status));
	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	for (uint64_t t0 = harness_now_ns();
	     (__atomic_load_n(&v.acks[slot].ak_word, __ATOMIC_ACQUIRE) & 3) !=
	     0;
	     sched_yield())
		ck_assert_msg(harness_now_ns() - t0 < 20000000000ull,
			      "carmyd never answered in the slot");

	/* Purged, and the entry taken by another call. */
	harness_path("tools/carmyctl", ctl, sizeof(ctl));
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' purge --older-than 0s "
		 ">/dev/null", ctl, d.socket);
	ck_assert_int_eq(system(cmd), 0);
	for (int i = 0; i < 4 && !taken; i++) {
		struct carmy_reservation r = CARMY_RESERVATION_INIT;
		char rid[32];
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "after-%d", i);
		call = E2E_CALL("p", "s", rid);
		ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
		taken = memcmp(en->en_exec, bytes, SHM_EXEC_LEN) != 0;
		carmy_reservation_clear(&r);
	}
	ck_assert_msg(taken, "no call took the purged entry");
	shm_unmap(&v);

	ck_assert_int_eq(kill(pid, SIGCONT), 0);
	ck_assert_msg(e2e_read_full(out[0], &rc, sizeof(rc),
				    HARNESS_WAIT_MS) == 0,
		      "carmy_complete never returned");
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(harness_waitpid(pid, HARNESS_WAIT_MS), 0);
	close(go[1]);
	close(out[0]);
	finish(dir);
}
END_TEST

/*
 * With one event loop, requests of many clients still go out together.
 * A request that came alone was written on the loop's own thread; with a
 * single loop (the default on one CPU) the loop then sat through every
 * flush while the requests behind it waited, the next came alone again,
 * and every flush held one record. Now a request the loop has others
 * behind is left to the journal's thread. carmyd says at exit how many
 * records went out in how many flushes.
 */
#define GROUP_CLIENTS 8
#define GROUP_CYCLES 100

static void group_client(const char *socket, int k)
{
	carmy_t *h = NULL;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char rid[32];

	if (carmy_connect(&h, socket) != 0)
		_exit(2);
	for (int i = 0; i < GROUP_CYCLES; i++) {
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "group-%d-%d", k, i);
		call = E2E_CALL("p", "s", rid);
		if (carmy_begin(h, &call, &r) != CARMY_RESERVED ||
		    carmy_complete(h, &r, CARMY_STATUS_COMPLETED, "ok", 2) != 0)
			_exit(3);
	}
	carmy_reservation_clear(&r);
	carmy_close(h);
	_exit(0);
}

START_TEST(test_one_loop_still_commits_in_groups)
{
	char dir[128], spec[160], logpath[192], line[512];
	const char *opts[16];
	pid_t kids[GROUP_CLIENTS];
	unsigned long long records = 0, flushes = 0;
	FILE *f;

	new_dir(dir, sizeof(dir));
	snprintf(logpath, sizeof(logpath), "%s/carmyd.log", dir);
	journal_opts(opts, spec, sizeof(spec), dir, "4096", "256");
	opts[8] = "--threads";
	opts[9] = "1";
	opts[10] = "--log-file";
	opts[11] = logpath;
	opts[12] = "--log-level";
	opts[13] = "info";
	opts[14] = NULL;
	e2e_start(&d, opts);
	for (int k = 0; k < GROUP_CLIENTS; k++) {
		kids[k] = fork();
		ck_assert_int_ge(kids[k], 0);
		if (kids[k] == 0)
			group_client(d.socket, k);
	}
	for (int k = 0; k < GROUP_CLIENTS; k++) {
		int st;

		ck_assert_int_eq(waitpid(kids[k], &st, 0), kids[k]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "client %d: status %#x", k, st);
	}
	e2e_stop(&d);		/* the journal's summary comes at exit */
	memset(&d, 0, sizeof(d));
	f = fopen(logpath, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		const char *at = strstr(line, " records in ");

		if (at != NULL) {
			while (at > line && at[-1] != ' ')
				at--;
			ck_assert_int_eq(sscanf(at, "%llu records in %llu",
						&records, &flushes), 2);
		}
	}
	fclose(f);
	e2e_note("one loop, %d clients: %llu records in %llu flushes",
		 GROUP_CLIENTS, records, flushes);
	ck_assert_uint_eq(records, 2ull * GROUP_CLIENTS * GROUP_CYCLES);
	ck_assert_msg(flushes < records, "every flush held one record");
	e2e_rm_rf(dir);
}
END_TEST

static Suite *journal_suite(void)
{
	Suite *s = suite_create("journal");
	TCase *tc = tcase_create("journal");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_acknowledged_results_survive_a_reboot);
	tcase_add_test(tc, test_acknowledged_results_survive_a_reboot_posted);
	tcase_add_test(tc, test_restart_on_the_kept_segment_then_reboot_agree);
	tcase_add_test(tc, test_release_cut_off_by_a_restart_reaches_the_journal);
	tcase_add_test(tc, test_a_release_naming_another_entry_forgets_nothing);
	tcase_add_test(tc, test_an_abandoned_call_stays_uncertain_across_reboots);
	tcase_add_test(tc, test_a_segment_left_half_loaded_is_loaded_again);
	tcase_add_test(tc, test_a_segment_loaded_from_another_store_is_loaded_again);
	tcase_add_test(tc, test_acknowledged_steps_survive_a_reboot_under_load);
	tcase_add_test(tc, test_torn_journal_restores_a_clean_prefix);
	tcase_add_test(tc, test_damage_in_the_middle_is_refused_not_cut);
	tcase_add_test(tc, test_bad_store_values_are_refused_without_a_segment);
	tcase_add_test(tc, test_unusable_journal_is_refused_without_a_segment);
	tcase_add_test(tc, test_a_client_sleeps_once_per_answer);
	tcase_add_test(tc, test_one_loop_still_commits_in_groups);
	tcase_add_test(tc, test_a_client_waiting_in_its_slot_outlives_carmyd);
	tcase_add_test(tc, test_a_post_nobody_takes_is_sent_instead);
	tcase_add_test(tc, test_a_torn_post_is_sent_again_not_acted_on);
	tcase_add_test(tc, test_a_post_its_client_does_not_await_is_dropped);
	tcase_add_test(tc, test_a_completion_whose_entry_was_purged_before_it_looked);
	tcase_add_test(tc, test_a_release_is_recorded_when_another_call_comes_at_once);
	tcase_add_test(tc, test_a_release_sent_after_the_entry_was_given_back_is_recorded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	snprintf(root, sizeof(root), "/tmp/carmy-journal-test.XXXXXX");
	if (mkdtemp(root) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	sr = srunner_create(journal_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	/* Whatever the tests left, failed or not. */
	e2e_rm_rf(root);
	return failed != 0;
}
