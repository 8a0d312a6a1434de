/*
 * check_races.c - WORKERS real processes, each with its own connection,
 * race on one new identity, round after round: exactly one is told to run,
 * the others are told EXECUTION_UNCERTAIN (running) while it runs, and all
 * get the winner's replay once it completed.
 *
 * The workers are forked once and reused for every round. They move in
 * lock-step through a process-shared barrier (a futex in a MAP_SHARED page,
 * every wait bounded by a deadline), and write what each call returned into
 * that page; the test process checks every round once they are done.
 * CARMY_E2E_ROUNDS overrides the round count (a longer soak).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <urcu/arch.h>

#include "tests/e2e/e2e.h"

#define WORKERS 16
#define ROUNDS 1000		/* complete races in the default suite */
#define RELEASE_ROUNDS 200	/* races that start over after a release */
#define BARRIER_TIMEOUT_MS 20000
#define RUN_TIMEOUT_MS 55000	/* per test; CARMY_E2E_ROUNDS soaks scale it */

enum { PH_FIRST, PH_AFTER_RELEASE, PH_REPLAY, NPHASES };

struct barrier {
	uint32_t count;
	uint32_t gen;		/* the futex word */
	uint32_t broken;	/* someone gave up: everyone leaves */
};

/* What one worker saw in one round. */
struct seen {
	int rc[NPHASES];
	int state[NPHASES];
	char exec[NPHASES][CARMY_EXECUTION_ID_LEN + 1];
	int status;		/* of the replay */
	int result_ok;		/* the replay held the winner's bytes */
	int release_rc;		/* the first winner's release */
	int complete_rc;	/* the final winner's complete */
};

struct shared {
	struct barrier bar;
	int rounds;
	int release_first;
	char socket[160];
	struct seen seen[];	/* rounds x WORKERS */
};

static struct carmyd_proc d;
static struct shared *sh;
static size_t sh_size;

/* ------------------------------------------------------------ barrier */

static long futex(uint32_t *word, int op, uint32_t val,
		  const struct timespec *ts)
{
	return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

static void barrier_break(struct barrier *b)
{
	__atomic_store_n(&b->broken, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&b->gen, 1, __ATOMIC_SEQ_CST);
	futex(&b->gen, FUTEX_WAKE, INT_MAX, NULL);
}

/* Wait until n processes arrived. Returns 0, or -1 if the barrier broke or
 * the deadline passed (then it breaks it for everyone). */
static int barrier_wait(struct barrier *b, uint32_t n)
{
	uint64_t deadline = harness_now_ns() +
			    (uint64_t)BARRIER_TIMEOUT_MS * 1000000u;
	uint32_t g = __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);
	unsigned spins = 0;

	if (__atomic_load_n(&b->broken, __ATOMIC_ACQUIRE))
		return -1;
	if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == n) {
		/* Last in: reset for the next use, then open. Others only
		 * come back after seeing gen move, so they see count 0. */
		__atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&b->gen, g + 1, __ATOMIC_RELEASE);
		futex(&b->gen, FUTEX_WAKE, INT_MAX, NULL);
		return 0;
	}
	for (;;) {
		uint64_t now;
		struct timespec ts;

		if (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) != g)
			return __atomic_load_n(&b->broken, __ATOMIC_ACQUIRE) ? -1 : 0;
		if (++spins < 64) {
			caa_cpu_relax();
			continue;
		}
		now = harness_now_ns();
		if (now > deadline) {
			barrier_break(b);
			return -1;
		}
		ts.tv_sec = 0;
		ts.tv_nsec = (long)((deadline - now) < 100000000u ?
				    (deadline - now) : 100000000u);
		futex(&b->gen, FUTEX_WAIT, g, &ts);
	}
}

/* ------------------------------------------------------------ workers */

static void round_call(int round, char *rid, size_t size,
		       struct carmy_call *call)
{
	snprintf(rid, size, "race-%d", round);
	*call = E2E_CALL("racer", "session", rid);
}

/* The winner's result: "round" NUL round-number, so NULs are replayed. */
static size_t round_result(int round, char *buf, size_t size)
{
	int n = snprintf(buf, size, "round#%d", round);

	buf[5] = '\0';
	return (size_t)n;
}

static void race_phase(carmy_t *c, const struct carmy_call *call,
		       struct carmy_reservation *r, struct seen *s, int ph)
{
	s->rc[ph] = carmy_begin(c, call, r);
	s->state[ph] = r->state;
	memcpy(s->exec[ph], r->execution_id, sizeof(s->exec[ph]));
}

static int worker(int w)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	carmy_t *c = NULL;

	if (carmy_connect(&c, sh->socket) != 0) {
		barrier_break(&sh->bar);
		return 1;
	}
	for (int round = 0; round < sh->rounds; round++) {
		struct seen *s = &sh->seen[round * WORKERS + w];
		struct carmy_call call;
		char rid[32], want[32];
		size_t want_len = round_result(round, want, sizeof(want));
		bool mine;

		round_call(round, rid, sizeof(rid), &call);
		if (barrier_wait(&sh->bar, WORKERS) != 0)
			return 2;
		race_phase(c, &call, &r, s, PH_FIRST);
		/* Nobody finishes before all have asked: the losers' answers
		 * were all given while the winner ran. */
		if (barrier_wait(&sh->bar, WORKERS) != 0)
			return 2;
		mine = s->rc[PH_FIRST] == CARMY_RESERVED;
		if (sh->release_first) {
			if (mine)
				s->release_rc = carmy_release(c, &r);
			if (barrier_wait(&sh->bar, WORKERS) != 0)
				return 2;
			race_phase(c, &call, &r, s, PH_AFTER_RELEASE);
			if (barrier_wait(&sh->bar, WORKERS) != 0)
				return 2;
			mine = s->rc[PH_AFTER_RELEASE] == CARMY_RESERVED;
		}
		if (mine)
			s->complete_rc = carmy_complete(c, &r,
							CARMY_STATUS_COMPLETED,
							want, want_len);
		if (barrier_wait(&sh->bar, WORKERS) != 0)
			return 2;
		race_phase(c, &call, &r, s, PH_REPLAY);
		s->status = r.status;
		s->result_ok = r.result_len == want_len &&
			       memcmp(r.result, want, want_len) == 0;
	}
	carmy_reservation_clear(&r);
	carmy_close(c);
	return 0;
}

/* ------------------------------------------------------------ the test */

static int rounds_wanted(int dflt);

/* Every race leaves a completed entry: room for a soak's worth of them. */
static void setup(void)
{
	static char cap[16];
	static const char *const opts[] = { "--capacity", cap,
					    "--max-result", "64", NULL };
	int rounds = rounds_wanted(ROUNDS);

	snprintf(cap, sizeof(cap), "%d", rounds < 2048 ? 4096 : 2 * rounds);
	e2e_start(&d, opts);
}

static void teardown(void)
{
	e2e_stop(&d);
	if (sh != NULL)
		munmap(sh, sh_size);
	sh = NULL;
}

static int rounds_wanted(int dflt)
{
	const char *env = getenv("CARMY_E2E_ROUNDS");
	int n = env != NULL ? atoi(env) : 0;

	return n > 0 && n <= 100000 ? n : dflt;
}

/* Fork the workers, let them race, and wait for all of them. */
static void run_races(int rounds, bool release_first)
{
	pid_t pids[WORKERS];
	int left = WORKERS;
	uint64_t t0 = harness_now_ns();
	uint64_t scale = rounds > ROUNDS ? (uint64_t)rounds / ROUNDS + 1 : 1;
	uint64_t deadline = t0 + scale * RUN_TIMEOUT_MS * 1000000u;

	sh_size = sizeof(*sh) + (size_t)rounds * WORKERS * sizeof(struct seen);
	sh = mmap(NULL, sh_size, PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sh, MAP_FAILED);
	sh->rounds = rounds;
	sh->release_first = release_first;
	snprintf(sh->socket, sizeof(sh->socket), "%s", d.socket);

	fflush(NULL);
	for (int w = 0; w < WORKERS; w++) {
		pids[w] = fork();
		ck_assert_int_ge(pids[w], 0);
		if (pids[w] == 0)
			_exit(worker(w));
	}
	while (left > 0) {
		for (int w = 0; w < WORKERS; w++) {
			int st;

			if (pids[w] == 0 || waitpid(pids[w], &st, WNOHANG) != pids[w])
				continue;
			pids[w] = 0;
			left--;
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				barrier_break(&sh->bar);
				for (int k = 0; k < WORKERS; k++)
					if (pids[k] > 0)
						kill(pids[k], SIGKILL);
				ck_abort_msg("worker %d failed (wait status %#x)",
					     w, st);
			}
		}
		if (left > 0 && harness_now_ns() > deadline) {
			for (int k = 0; k < WORKERS; k++)
				if (pids[k] > 0)
					kill(pids[k], SIGKILL);
			ck_abort_msg("the races did not finish in %llu ms",
				     (unsigned long long)scale * RUN_TIMEOUT_MS);
		}
		if (left > 0) {
			struct timespec ts = { 0, 2000000 };

			nanosleep(&ts, NULL);	/* reaping, not synchronising */
		}
	}
	e2e_note("%d races of %d processes%s in %.0f ms", rounds, WORKERS,
		 release_first ? " (each restarted by a release)" : "",
		 e2e_ms_since(t0));
}

/* In phase ph of round, exactly one worker was told to run; every other
 * one was told the identity is running under the winner's execution id.
 * Returns the winner. */
static int check_one_winner(int round, int ph)
{
	int winner = -1;
	const struct seen *ws;

	for (int w = 0; w < WORKERS; w++) {
		const struct seen *s = &sh->seen[round * WORKERS + w];

		if (s->rc[ph] != CARMY_RESERVED)
			continue;
		ck_assert_msg(winner < 0, "round %d phase %d: workers %d and %d "
			      "were both told to run", round, ph, winner, w);
		winner = w;
	}
	ck_assert_msg(winner >= 0, "round %d phase %d: nobody was told to run",
		      round, ph);
	ws = &sh->seen[round * WORKERS + winner];
	ck_assert_msg(e2e_exec_id_valid(ws->exec[ph]), "round %d: bad id '%s'",
		      round, ws->exec[ph]);
	for (int w = 0; w < WORKERS; w++) {
		const struct seen *s = &sh->seen[round * WORKERS + w];

		if (w == winner)
			continue;
		ck_assert_msg(s->rc[ph] == CARMY_EUNCERTAIN &&
			      s->state[ph] == CARMY_STATE_RUNNING,
			      "round %d phase %d worker %d: %s (state %s) "
			      "while the winner ran", round, ph, w,
			      carmy_errname(s->rc[ph]),
			      carmy_state_name(s->state[ph]));
		ck_assert_str_eq(s->exec[ph], ws->exec[ph]);
	}
	return winner;
}

static void check_rounds(bool release_first)
{
	for (int round = 0; round < sh->rounds; round++) {
		const struct seen *ws;
		int winner = check_one_winner(round, PH_FIRST);
		char first[CARMY_EXECUTION_ID_LEN + 1];

		ws = &sh->seen[round * WORKERS + winner];
		strcpy(first, ws->exec[PH_FIRST]);
		if (release_first) {
			ck_assert_int_eq(ws->release_rc, 0);
			winner = check_one_winner(round, PH_AFTER_RELEASE);
			ws = &sh->seen[round * WORKERS + winner];
			ck_assert_str_ne(ws->exec[PH_AFTER_RELEASE], first);
		}
		ck_assert_msg(ws->complete_rc == 0, "round %d: complete: %s",
			      round, carmy_errname(ws->complete_rc));
		for (int w = 0; w < WORKERS; w++) {
			const struct seen *s = &sh->seen[round * WORKERS + w];

			ck_assert_msg(s->rc[PH_REPLAY] == CARMY_REPLAY,
				      "round %d worker %d after completion: %s",
				      round, w, carmy_errname(s->rc[PH_REPLAY]));
			ck_assert_str_eq(s->exec[PH_REPLAY],
					 ws->exec[release_first ? PH_AFTER_RELEASE :
								  PH_FIRST]);
			ck_assert_int_eq(s->status, CARMY_STATUS_COMPLETED);
			ck_assert_msg(s->result_ok, "round %d worker %d: the "
				      "replay's bytes differ", round, w);
		}
	}
}

START_TEST(test_racing_processes_run_a_new_identity_exactly_once)
{
	run_races(rounds_wanted(ROUNDS), false);
	check_rounds(false);
	ck_assert(e2e_alive(&d));
}
END_TEST

START_TEST(test_race_after_release_again_runs_exactly_once)
{
	run_races(rounds_wanted(RELEASE_ROUNDS), true);
	check_rounds(true);
	ck_assert(e2e_alive(&d));
}
END_TEST

static Suite *races_suite(void)
{
	Suite *s = suite_create("races");
	TCase *tc = tcase_create("races");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_racing_processes_run_a_new_identity_exactly_once);
	tcase_add_test(tc, test_race_after_release_again_runs_exactly_once);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(races_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
