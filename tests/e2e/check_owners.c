/*
 * check_owners.c - dead owners. A process that holds a running reservation
 * and dies (kill -9), closes its connection, or exits without completing
 * leaves the entry EXECUTION_UNCERTAIN (interrupted), promptly and for
 * good: never a second execution. A claimer outliving its main thread is
 * still alive. Processes killed at random moments in the
 * middle of claiming leave no stuck ticket or bucket, and the whole
 * remaining capacity stays usable.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <urcu/arch.h>

#include "libclient/wire.h"
#include "shm/atomic.h"
#include "tests/e2e/e2e.h"

/* The requirement is 100 ms; make check-timing asserts it with room for
 * a loaded machine (e2e_within). The figure is always printed. */
#define LATENCY_LIMIT_MS 1000.0
/* How long a retry polls for the death to be noticed: a bound on failure,
 * not the measure (that is LATENCY_LIMIT_MS). */
#define POLL_TIMEOUT_MS HARNESS_WAIT_MS

#define MID_CHILDREN 8
#define MID_KILLS 600
/* Calls each churner makes before it idles. Completed and uncertain entries
 * are forever and every release leaves a tombstone until carmyd reclaims it,
 * so the budget keeps the run inside the table (capacity 4096, 8192
 * buckets) and the test about claims, not about running out of room. */
#define MID_BUDGET 6

static struct carmyd_proc d;
static carmy_t *c;

static void setup(void)
{
	static const char *const opts[] = { "--capacity", "64",
					    "--max-result", "256", NULL };

	e2e_start(&d, opts);
	c = e2e_connect(&d);
}

static void teardown(void)
{
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}

/*
 * The child holding call's reservation let go at t0_ns. Wait until a retry
 * is told EXECUTION_UNCERTAIN (interrupted) with the child's execution id,
 * print how long that took, and prove that no retry, from this or a new
 * process, is ever told to run it again.
 */
static void expect_interrupted(const struct e2e_child *ch,
			       const struct carmy_call *call, uint64_t t0_ns,
			       const char *how)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	uint64_t seen;
	double ms;
	int rc;

	rc = e2e_poll_begin(c, call, &r, CARMY_EUNCERTAIN,
			    CARMY_STATE_INTERRUPTED, POLL_TIMEOUT_MS, &seen);
	ms = (double)(seen - t0_ns) / 1e6;
	ck_assert_msg(rc == CARMY_EUNCERTAIN && r.state == CARMY_STATE_INTERRUPTED,
		      "%s: after %.1f ms a retry still gets %s (state %s)", how,
		      ms, carmy_errname(rc), carmy_state_name(r.state));
	ck_assert_str_eq(r.execution_id, ch->exec);
	e2e_note("dead owner (%s): uncertain after %.3f ms", how, ms);
	e2e_within(ms, LATENCY_LIMIT_MS, "dead owner noticed");

	for (int i = 0; i < 200; i++) {
		rc = carmy_begin(c, call, &r);
		ck_assert_msg(rc == CARMY_EUNCERTAIN, "retry %d: %s", i,
			      carmy_errname(rc));
		ck_assert_int_eq(r.state, CARMY_STATE_INTERRUPTED);
	}
	/* Nor from a fresh connection, nor once carmyd has ticked. */
	{
		carmy_t *c2 = e2e_connect(&d);

		ck_assert_int_eq(carmy_begin(c2, call, &r), CARMY_EUNCERTAIN);
		ck_assert_int_eq(r.state, CARMY_STATE_INTERRUPTED);
		carmy_close(c2);
	}
	carmy_reservation_clear(&r);
}

/* ------------------------------------------------------------ one owner */

START_TEST(test_retry_after_owner_kill_is_uncertain)
{
	struct carmy_call call = E2E_CALL("p", "s", "killed");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct e2e_child ch;
	uint64_t t0;

	e2e_child_reserve(&ch, d.socket, &call, E2E_HOLD);
	/* While it lives, it is running. */
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(r.execution_id, ch.exec);
	t0 = harness_now_ns();
	ck_assert_int_eq(kill(ch.pid, SIGKILL), 0);
	expect_interrupted(&ch, &call, t0, "kill -9");
	e2e_child_reap(&ch);
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_retry_after_owner_closes_connection_is_uncertain)
{
	struct carmy_call call = E2E_CALL("p", "s", "closed");
	struct e2e_child ch;

	e2e_child_reserve(&ch, d.socket, &call, E2E_CLOSE);
	/* The child is still alive: only its connection is gone. */
	ck_assert_int_eq(kill(ch.pid, 0), 0);
	expect_interrupted(&ch, &call, ch.end_ns, "carmy_close");
	e2e_child_reap(&ch);
}
END_TEST

START_TEST(test_retry_after_owner_exits_without_completing_is_uncertain)
{
	struct carmy_call call = E2E_CALL("p", "s", "exited");
	struct e2e_child ch;
	int st;

	e2e_child_reserve(&ch, d.socket, &call, E2E_EXIT);
	expect_interrupted(&ch, &call, ch.end_ns, "exit(0)");
	st = harness_waitpid(ch.pid, HARNESS_WAIT_MS);
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "the child did not exit normally (%#x)", st);
	ch.pid = 0;
	e2e_child_reap(&ch);
}
END_TEST

/* One process's death touches only its own entries: another live owner's
 * reservation stays running and completable, finished entries replay. */
START_TEST(test_owner_death_leaves_other_owners_alone)
{
	struct carmy_call mine = E2E_CALL("p", "s", "mine");
	struct carmy_call done = E2E_CALL("p", "s", "done");
	struct carmy_call theirs[3] = { E2E_CALL("p", "s", "theirs-0"),
					 E2E_CALL("p", "s", "theirs-1"),
					 E2E_CALL("p", "s", "theirs-2") };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	struct e2e_child ch[3];

	ck_assert_int_eq(carmy_begin(c, &done, &u), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &u, CARMY_STATUS_COMPLETED, "d", 1), 0);
	ck_assert_int_eq(carmy_begin(c, &mine, &r), CARMY_RESERVED);
	for (int i = 0; i < 3; i++)
		e2e_child_reserve(&ch[i], d.socket, &theirs[i], E2E_HOLD);
	kill(ch[1].pid, SIGKILL);
	ck_assert_int_eq(e2e_poll_begin(c, &theirs[1], &u, CARMY_EUNCERTAIN,
					CARMY_STATE_INTERRUPTED, POLL_TIMEOUT_MS,
					NULL), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_INTERRUPTED);
	for (int i = 0; i < 3; i += 2) {
		ck_assert_int_eq(carmy_begin(c, &theirs[i], &u), CARMY_EUNCERTAIN);
		ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);
	}
	ck_assert_int_eq(carmy_begin(c, &done, &u), CARMY_REPLAY);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "m", 1), 0);
	ck_assert_int_eq(carmy_begin(c, &mine, &u), CARMY_REPLAY);
	ck_assert_str_eq(u.result, "m");
	for (int i = 0; i < 3; i++)
		e2e_child_reap(&ch[i]);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
}
END_TEST

/* A process holding many reservations dies: all of them turn uncertain. */
START_TEST(test_all_reservations_of_a_dead_owner_turn_uncertain)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	int p[2];
	pid_t pid;
	char b;

	ck_assert_int_eq(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		carmy_t *h = NULL;
		int ok = carmy_connect(&h, d.socket) == 0;

		for (int i = 0; ok && i < 32; i++) {
			char rid[32];
			struct carmy_call call;

			snprintf(rid, sizeof(rid), "many-%d", i);
			call = E2E_CALL("p", "s", rid);
			ok = carmy_begin(h, &call, &r) == CARMY_RESERVED;
		}
		b = ok ? 'y' : 'n';
		if (write(p[1], &b, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	ck_assert_int_eq(e2e_read_full(p[0], &b, 1, HARNESS_WAIT_MS), 0);
	ck_assert_int_eq(b, 'y');
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	for (int i = 0; i < 32; i++) {
		char rid[32];
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "many-%d", i);
		call = E2E_CALL("p", "s", rid);
		ck_assert_int_eq(e2e_poll_begin(c, &call, &r, CARMY_EUNCERTAIN,
						CARMY_STATE_INTERRUPTED,
						POLL_TIMEOUT_MS, NULL),
				 CARMY_EUNCERTAIN);
		ck_assert_int_eq(r.state, CARMY_STATE_INTERRUPTED);
	}
	close(p[0]);
	carmy_reservation_clear(&r);
}
END_TEST

/* ------------------------------------------------------------ mid-claim */

struct progress {
	uint64_t ops[MID_CHILDREN];
};

/* A child in a tight loop over new identities: begin, then release,
 * complete or hold, by turns, up to MID_BUDGET calls; then it idles. It never
 * returns; SIGKILL ends it. */
static void churner(const char *socket, struct progress *pg, int slot,
		    unsigned gen)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	carmy_t *h = NULL;
	char rid[48];

	if (carmy_connect(&h, socket) != 0)
		_exit(1);
	for (unsigned i = 0; i < MID_BUDGET; i++) {
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "mid-%d-%u-%u", slot, gen, i);
		call = E2E_CALL("churn", "s", rid);
		if (carmy_begin(h, &call, &r) == CARMY_RESERVED) {
			if (i % 3 == 0)
				carmy_release(h, &r);
			else if (i % 3 == 1)
				carmy_complete(h, &r, CARMY_STATUS_COMPLETED,
					       rid, strlen(rid));
			/* else: hold it, running, until killed */
		}
		__atomic_add_fetch(&pg->ops[slot], 1, __ATOMIC_RELEASE);
	}
	for (;;)
		pause();
}

/* Everything carmyd should have settled once every owner is dead. */
struct census {
	uint32_t held;		/* tickets naming an owner or SWEEPING */
	uint32_t live;		/* tickets LIVE */
	uint32_t busy;		/* buckets RUNNING or BLOCKED, or bad state */
	uint32_t final;		/* buckets COMPLETED or UNCERTAIN */
	uint32_t uncertain;
	uint32_t tombs;
};

static void take_census(const struct shm_view *v, struct census *cs)
{
	memset(cs, 0, sizeof(*cs));
	for (uint32_t e = 0; e < v->geo.capacity; e++) {
		uint32_t t = SHM_T_WHAT(__atomic_load_n(&v->tickets[e],
							__ATOMIC_ACQUIRE));

		/* An ORPHAN is a dead owner's claim kept until its process
		 * exits: these processes are killed and reaped, so it too
		 * must be gone once carmyd has swept. */
		if (t >= SHM_OWNER_MIN || t == SHM_TICKET_SWEEPING ||
		    t == SHM_TICKET_ORPHAN)
			cs->held++;
		else if (t == SHM_TICKET_LIVE)
			cs->live++;
	}
	for (uint32_t b = 0; b < v->geo.nbuckets; b++) {
		uint64_t w = __atomic_load_n(&v->buckets[b], __ATOMIC_ACQUIRE);

		switch (SHM_W_STATE(w)) {
		case SHM_FREE:
			break;
		case SHM_COMPLETED:
			cs->final++;
			break;
		case SHM_UNCERTAIN:
			cs->final++;
			cs->uncertain++;
			break;
		case SHM_TOMB:
			cs->tombs++;
			break;
		default:
			cs->busy++;
			break;
		}
	}
}

START_TEST(test_owners_killed_mid_claim_leave_nothing_stuck)
{
	struct progress *pg;
	pid_t pids[MID_CHILDREN];
	unsigned gens[MID_CHILDREN];
	unsigned seed = (unsigned)harness_now_ns();
	struct shm_view v;
	struct census cs;
	uint64_t t0, deadline;
	int kills = 0;

	/* This test wants more room than the fixture's carmyd. */
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
	{
		static const char *const opts[] = { "--capacity", "4096",
						    "--max-result", "64", NULL };

		e2e_start(&d, opts);
	}
	e2e_note("mid-claim kill seed %u", seed);
	pg = mmap(NULL, sizeof(*pg), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(pg, MAP_FAILED);

	fflush(NULL);
	for (int i = 0; i < MID_CHILDREN; i++) {
		gens[i] = 0;
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0)
			churner(d.socket, pg, i, 0);
	}
	t0 = harness_now_ns();
	while (kills < MID_KILLS) {
		int i = rand_r(&seed) % MID_CHILDREN;
		uint64_t want = (uint64_t)(rand_r(&seed) % MID_BUDGET);
		unsigned spin = (unsigned)(rand_r(&seed) % 20000);
		int st;

		/* Let it make a random number of calls (0: it may still be
		 * connecting), then a random few microseconds more, then kill
		 * it wherever it is. */
		deadline = harness_now_ns() +
			   (uint64_t)HARNESS_WAIT_MS * 1000000u;
		while (__atomic_load_n(&pg->ops[i], __ATOMIC_RELAXED) < want) {
			ck_assert_msg(harness_now_ns() < deadline,
				      "churner %d made no progress", i);
			caa_cpu_relax();
		}
		for (volatile unsigned k = 0; k < spin; k++)
			;
		kill(pids[i], SIGKILL);
		ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
		ck_assert_msg(WIFSIGNALED(st), "churner %d died by itself (%#x)",
			      i, st);
		kills++;
		__atomic_store_n(&pg->ops[i], 0, __ATOMIC_RELAXED);
		gens[i]++;
		fflush(NULL);
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0)
			churner(d.socket, pg, i, gens[i]);
	}
	for (int i = 0; i < MID_CHILDREN; i++) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
	e2e_note("%d churners killed at random in %.0f ms", kills + MID_CHILDREN,
		 e2e_ms_since(t0));

	/* Nobody is connected now. Once carmyd has swept, no ticket may be
	 * held and no bucket stuck. */
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	t0 = harness_now_ns();
	deadline = t0 + (uint64_t)HARNESS_WAIT_MS * 1000000u;
	for (;;) {
		take_census(&v, &cs);
		if ((cs.held == 0 && cs.busy == 0) || harness_now_ns() > deadline)
			break;
		{
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);	/* polling, bounded above */
		}
	}
	e2e_note("after the kills: %u completed or uncertain (%u uncertain), "
		 "%u tombstones; settled in %.1f ms", cs.final, cs.uncertain,
		 cs.tombs, e2e_ms_since(t0));
	ck_assert_msg(cs.held == 0, "%u tickets still held by dead owners",
		      cs.held);
	ck_assert_msg(cs.busy == 0, "%u buckets stuck RUNNING or BLOCKED",
		      cs.busy);
	ck_assert_uint_eq(cs.live, cs.final);
	/* Every final bucket names an entry that is LIVE and points back. */
	for (uint32_t b = 0; b < v.geo.nbuckets; b++) {
		uint64_t w = v.buckets[b];
		unsigned st = SHM_W_STATE(w);
		uint32_t e = SHM_W_ENTRY(w);

		if (st != SHM_COMPLETED && st != SHM_UNCERTAIN)
			continue;
		ck_assert_uint_lt(e, v.geo.capacity);
		ck_assert_uint_eq(v.tickets[e], SHM_TICKET_LIVE);
		ck_assert_uint_eq(shm_entry_at(&v, e)->en_bucket, b);
	}

	/* All the rest of the capacity can still be reserved. */
	c = e2e_connect(&d);
	{
		struct carmy_reservation r = CARMY_RESERVATION_INIT;
		uint32_t room = v.geo.capacity - cs.live;
		char rid[32];
		int rc;

		for (uint32_t i = 0; i <= room; i++) {
			struct carmy_call call;

			snprintf(rid, sizeof(rid), "after-%u", i);
			call = E2E_CALL("p", "s", rid);
			rc = carmy_begin(c, &call, &r);
			ck_assert_msg(rc == (i < room ? CARMY_RESERVED :
						       CARMY_ECAPACITY),
				      "new identity %u of %u: %s", i + 1, room,
				      carmy_errname(rc));
		}
		carmy_reservation_clear(&r);
	}
	shm_unmap(&v);
	munmap(pg, sizeof(*pg));
}
END_TEST

/* ------------------------------------------- a claimer outliving its main */

/* In the claimer's second thread: once the main thread has exited (the
 * process shows Z in /proc/PID/stat, yet runs on), close the connection,
 * which makes carmyd sweep the owner, then wait for the test's word. */
static void *claimer_thread(void *arg)
{
	const int *fds = arg;	/* the connection, the word's pipe */
	char path[64], buf[512], *p = NULL;
	char go;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)getpid());
	for (int i = 0; i < 10000; i++) {
		FILE *f = fopen(path, "r");
		size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (f != NULL)
			fclose(f);
		buf[n] = '\0';
		p = strrchr(buf, ')');
		if (p != NULL && p[1] == ' ' && p[2] == 'Z')
			break;
		poll(NULL, 0, 1);
	}
	if (p == NULL || p[2] != 'Z')
		_exit(3);
	close(fds[0]);
	if (read(fds[1], &go, 1) != 1)
		_exit(4);
	_exit(0);
}

/* A new owner's HELLO on fd: its owner id, or 0. */
static uint32_t hello_new(int fd)
{
	msgpack_sbuffer sb;
	struct wire_msg m;
	uint8_t buf[512];
	size_t have = 0;
	long n = 0;

	msgpack_sbuffer_init(&sb);
	if (wire_put_hello(&sb, shm_layout_signature(), 0, 0) != 0 ||
	    send(fd, sb.data, sb.size, MSG_NOSIGNAL) != (ssize_t)sb.size)
		return 0;
	msgpack_sbuffer_destroy(&sb);
	while (n == 0 && have < sizeof(buf)) {
		if (e2e_read_full(fd, buf + have, 1, HARNESS_WAIT_MS) != 0)
			return 0;
		n = wire_scan(buf, ++have, sizeof(buf));
		if (n < 0)
			return 0;
	}
	if (n == 0 || wire_decode(buf, have, 0, &m) != 0 ||
	    m.type != WIRE_HELLO)
		return 0;
	return m.u.hello_ok.owner;
}

/*
 * A process whose main thread has called pthread_exit() shows Z in
 * /proc/PID/stat while its other threads run, and one of them may be in the
 * middle of a claim. Its connection closed, carmyd must hold such a claim
 * (ORPHAN) while the process lives, not free the ticket for another call
 * whose entry the claimer would then write over; once the process is gone
 * the ticket is freed.
 */
START_TEST(test_a_claimer_whose_main_thread_exited_is_alive)
{
	int go[2], report[2];
	struct shm_view v;
	uint64_t t, deadline;
	uint32_t e = 0;
	pid_t pid;

	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(report), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		static int fds[2];
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		struct shm_view cv;
		uint32_t owner;
		pthread_t th;

		fds[0] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		fds[1] = go[0];
		strcpy(sa.sun_path, d.socket);
		if (connect(fds[0], (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
		    (owner = hello_new(fds[0])) == 0 ||
		    shm_map(d.segment, true, &cv) != 0)
			_exit(2);
		/* A claim, not published: what shm_reserve() holds for a
		 * moment before it publishes the bucket. */
		for (e = 0; e < cv.geo.capacity; e++)
			if (shm_cas(&cv.tickets[e], SHM_TICKET_FREE,
				    shm_ticket(owner, (uint32_t)getpid())) ==
			    SHM_TICKET_FREE)
				break;
		if (e == cv.geo.capacity ||
		    write(report[1], &e, sizeof(e)) != sizeof(e) ||
		    pthread_create(&th, NULL, claimer_thread, fds) != 0)
			_exit(2);
		pthread_exit(NULL);
	}
	close(go[0]);
	close(report[1]);
	ck_assert_int_eq(e2e_read_full(report[0], &e, sizeof(e),
				       HARNESS_WAIT_MS), 0);
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	ck_assert_uint_lt(e, v.geo.capacity);
	/* carmyd sweeps the owner once the connection is gone; SWEEPING is
	 * its word while it decides (long enough to be seen under TSan). */
	deadline = harness_now_ns() + (uint64_t)HARNESS_WAIT_MS * 1000000u;
	while ((SHM_T_WHAT(t = shm_load(&v.tickets[e])) >= SHM_OWNER_MIN ||
		SHM_T_WHAT(t) == SHM_TICKET_SWEEPING) &&
	       harness_now_ns() < deadline)
		poll(NULL, 0, 5);
	ck_assert_msg(SHM_T_WHAT(t) == SHM_TICKET_ORPHAN,
		      "the live claimer's ticket is %u, not ORPHAN (%u)",
		      SHM_T_WHAT(t), SHM_TICKET_ORPHAN);
	ck_assert_uint_eq(SHM_T_PID(t), (uint32_t)pid);
	/* Gone for good: the ticket is free again (carmyd's tick). */
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	ck_assert_int_eq(harness_waitpid(pid, HARNESS_WAIT_MS), 0);
	deadline = harness_now_ns() + (uint64_t)HARNESS_WAIT_MS * 1000000u;
	while ((t = shm_load(&v.tickets[e])) != SHM_TICKET_FREE &&
	       harness_now_ns() < deadline)
		poll(NULL, 0, 5);
	ck_assert_uint_eq(t, SHM_TICKET_FREE);
	shm_unmap(&v);
	close(go[1]);
	close(report[0]);
}
END_TEST

/* ------------------------------------------------- a stalled carmyd */

struct releaser {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct carmy_reservation *r;
	bool done;
	int rc;
};

static void *release_thread(void *arg)
{
	struct releaser *x = arg;
	int rc = carmy_release(c, x->r);

	pthread_mutex_lock(&x->lock);
	x->rc = rc;
	x->done = true;
	pthread_cond_signal(&x->cond);
	pthread_mutex_unlock(&x->lock);
	return NULL;
}

/*
 * carmyd stalls (stopped here; swapping, throttled, blocked writing its
 * log elsewhere) for longer than a second while a process releases one
 * call and runs another. Nothing is dead: when carmyd goes on, the release
 * is answered and the other call completes and replays. (libcarmy used to
 * give up on a release's answer after a second and drop the connection,
 * which carmyd took for the process dying: the running call turned
 * uncertain and its result was refused.)
 */
START_TEST(test_a_stalled_carmyd_leaves_a_live_owner_alive)
{
	struct carmy_call a = E2E_CALL("p", "s", "runs-on");
	struct carmy_call b = E2E_CALL("p", "s", "released");
	struct carmy_reservation ra = CARMY_RESERVATION_INIT;
	struct carmy_reservation rb = CARMY_RESERVATION_INIT;
	struct releaser x = { PTHREAD_MUTEX_INITIALIZER,
			      PTHREAD_COND_INITIALIZER, &rb, false, 0 };
	struct timespec until;
	pthread_t th;

	ck_assert_int_eq(carmy_begin(c, &a, &ra), CARMY_RESERVED);
	ck_assert_int_eq(carmy_begin(c, &b, &rb), CARMY_RESERVED);
	ck_assert_int_eq(kill(d.pid, SIGSTOP), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, release_thread, &x), 0);
	/* The stall: until the release is answered, or 1.5 s. */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1 + (until.tv_nsec >= 500000000);
	until.tv_nsec = (until.tv_nsec + 500000000) % 1000000000;
	pthread_mutex_lock(&x.lock);
	while (!x.done &&
	       pthread_cond_timedwait(&x.cond, &x.lock, &until) == 0)
		;
	pthread_mutex_unlock(&x.lock);
	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(x.rc, 0);
	ck_assert_int_eq(carmy_complete(c, &ra, CARMY_STATUS_COMPLETED, "ok", 2),
			 0);
	ck_assert_int_eq(carmy_begin(c, &a, &ra), CARMY_REPLAY);
	ck_assert_int_eq(carmy_begin(c, &b, &rb), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &rb, CARMY_STATUS_COMPLETED, "", 0),
			 0);
	carmy_reservation_clear(&ra);
	carmy_reservation_clear(&rb);
}
END_TEST

static Suite *owners_suite(void)
{
	Suite *s = suite_create("owners");
	TCase *tc = tcase_create("dead owner");
	TCase *mid = tcase_create("mid-claim");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_retry_after_owner_kill_is_uncertain);
	tcase_add_test(tc, test_retry_after_owner_closes_connection_is_uncertain);
	tcase_add_test(tc, test_retry_after_owner_exits_without_completing_is_uncertain);
	tcase_add_test(tc, test_owner_death_leaves_other_owners_alone);
	tcase_add_test(tc, test_all_reservations_of_a_dead_owner_turn_uncertain);
	tcase_add_test(tc, test_a_claimer_whose_main_thread_exited_is_alive);
	tcase_add_test(tc, test_a_stalled_carmyd_leaves_a_live_owner_alive);
	suite_add_tcase(s, tc);

	e2e_guard(mid);
	tcase_add_checked_fixture(mid, setup, teardown);
	tcase_add_test(mid, test_owners_killed_mid_claim_leave_nothing_stuck);
	suite_add_tcase(s, mid);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(owners_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
