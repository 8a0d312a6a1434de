/*
 * check_capacity.c - a bounded table that fails closed: with --capacity N,
 * the (N+1)th new identity gets IDEMPOTENCY_CAPACITY, nothing that exists is
 * evicted, a release makes room for exactly one, a completion always has
 * room, and a result over --max-result is recorded as failed with
 * RESULT_TOO_LARGE.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

#define CAP 8
#define MAX_RESULT 64

static struct carmyd_proc d;
static carmy_t *c;

static void setup(void)
{
	static const char *const opts[] = { "--capacity", "8",
					    "--max-result", "64", NULL };

	e2e_start(&d, opts);
	c = e2e_connect(&d);
}

static void teardown(void)
{
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}

static struct carmy_call call_n(char *rid, size_t size, const char *what,
				int i)
{
	snprintf(rid, size, "%s-%d", what, i);
	return E2E_CALL("p", "s", rid);
}

static int begin_n(const char *what, int i, struct carmy_reservation *r)
{
	char rid[32];
	struct carmy_call call = call_n(rid, sizeof(rid), what, i);

	return carmy_begin(c, &call, r);
}

/* Several distinct new identities are all refused for lack of room. */
static void expect_full(const char *what, int tries)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	for (int i = 0; i < tries; i++) {
		int rc = begin_n(what, i, &r);

		ck_assert_msg(rc == CARMY_ECAPACITY, "new identity %s-%d: %s",
			      what, i, carmy_errname(rc));
	}
	carmy_reservation_clear(&r);
}

/* Entries 0..3 completed, 4, 5 and 7 running here, 6 interrupted. */
static void expect_entries_answer(char exec[CAP][CARMY_EXECUTION_ID_LEN + 1],
				  const bool *running)
{
	static const uint8_t other[] = { 0x81, 0xa1, 'o', 0xc3 };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	for (int i = 0; i < CAP; i++) {
		char rid[32], want[16];
		struct carmy_call call = call_n(rid, sizeof(rid), "e", i);
		int rc = carmy_begin(c, &call, &r);

		ck_assert_str_eq(r.execution_id, exec[i]);
		if (!running[i] && i != 6) {
			ck_assert_msg(rc == CARMY_REPLAY, "entry %d: %s", i,
				      carmy_errname(rc));
			snprintf(want, sizeof(want), "r%d", i);
			ck_assert_str_eq(r.result, want);
		} else {
			ck_assert_msg(rc == CARMY_EUNCERTAIN, "entry %d: %s", i,
				      carmy_errname(rc));
			ck_assert_int_eq(r.state, i == 6 ? CARMY_STATE_INTERRUPTED :
							   CARMY_STATE_RUNNING);
		}
		call.args = other;
		call.args_len = sizeof(other);
		ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_ECONFLICT);
		ck_assert_str_eq(r.execution_id, exec[i]);
	}
	carmy_reservation_clear(&r);
}

/* Wait (bounded) until carmyd's tick has reclaimed every tombstone, so that
 * what follows runs after at least one tick. Returns whether it did. */
static bool wait_for_reclaim(int timeout_ms)
{
	struct shm_view v;
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	bool clean = false;

	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	while (!clean && harness_now_ns() < deadline) {
		struct timespec ts = { 0, 5000000 };

		clean = true;
		for (uint32_t b = 0; b < v.geo.nbuckets; b++)
			if (SHM_W_STATE(__atomic_load_n(&v.buckets[b],
							__ATOMIC_ACQUIRE)) == SHM_TOMB)
				clean = false;
		if (!clean)
			nanosleep(&ts, NULL);	/* polling, bounded above */
	}
	shm_unmap(&v);
	return clean;
}

START_TEST(test_capacity_plus_one_is_refused_and_nothing_is_evicted)
{
	struct carmy_reservation r[CAP];
	struct carmy_reservation x = CARMY_RESERVATION_INIT;
	char exec[CAP][CARMY_EXECUTION_ID_LEN + 1];
	bool running[CAP] = { false };
	struct e2e_child ch;
	char rid[32];

	for (int i = 0; i < CAP; i++) {
		r[i] = (struct carmy_reservation)CARMY_RESERVATION_INIT;
		if (i == 6) {	/* held by a process that then dies */
			struct carmy_call call = call_n(rid, sizeof(rid), "e", i);

			e2e_child_reserve(&ch, d.socket, &call, E2E_HOLD);
			strcpy(exec[i], ch.exec);
			continue;
		}
		ck_assert_int_eq(begin_n("e", i, &r[i]), CARMY_RESERVED);
		strcpy(exec[i], r[i].execution_id);
		if (i < 4) {
			char res[16];

			snprintf(res, sizeof(res), "r%d", i);
			ck_assert_int_eq(carmy_complete(c, &r[i],
							CARMY_STATUS_COMPLETED,
							res, strlen(res)), 0);
		} else {
			running[i] = true;
		}
	}
	kill(ch.pid, SIGKILL);
	{
		struct carmy_call call = call_n(rid, sizeof(rid), "e", 6);

		ck_assert_int_eq(e2e_poll_begin(c, &call, &x, CARMY_EUNCERTAIN,
						CARMY_STATE_INTERRUPTED, 2000,
						NULL), CARMY_EUNCERTAIN);
	}
	e2e_child_reap(&ch);

	/* Full: the (N+1)th is refused, again and again, and refusing it
	 * takes nothing from anyone. */
	expect_full("new", 50);
	expect_entries_answer(exec, running);

	/* A release makes room for exactly one new identity... */
	ck_assert_int_eq(carmy_release(c, &r[4]), 0);
	ck_assert_int_eq(begin_n("new", 0, &x), CARMY_RESERVED);
	expect_full("more", 5);
	/* ... which took the released one's room as well. */
	ck_assert_int_eq(begin_n("e", 4, &r[4]), CARMY_ECAPACITY);
	running[4] = false;

	/* Completing while full needs no new room. */
	ck_assert_int_eq(carmy_complete(c, &r[5], CARMY_STATUS_COMPLETED, "r5", 2),
			 0);
	running[5] = false;
	ck_assert_int_eq(carmy_complete(c, &x, CARMY_STATUS_COMPLETED, "n", 1), 0);

	/* After carmyd's tick (it reclaims the released bucket), still
	 * nothing is evicted and the table is still exactly full. */
	ck_assert_msg(wait_for_reclaim(HARNESS_WAIT_MS),
		      "the released bucket was never reclaimed");
	{
		struct carmy_reservation y = CARMY_RESERVATION_INIT;

		for (int i = 0; i < CAP; i++) {
			struct carmy_call call = call_n(rid, sizeof(rid), "e", i);
			int rc;

			if (i == 4)
				continue;	/* released, its room given away */
			rc = carmy_begin(c, &call, &y);
			ck_assert_msg(rc == (i == 6 || i == 7 ? CARMY_EUNCERTAIN :
								CARMY_REPLAY),
				      "entry %d after a tick: %s", i,
				      carmy_errname(rc));
			ck_assert_str_eq(y.execution_id, exec[i]);
		}
		carmy_reservation_clear(&y);
	}
	expect_full("late", 5);
	ck_assert_int_eq(begin_n("new", 0, &x), CARMY_REPLAY);
	for (int i = 0; i < CAP; i++)
		carmy_reservation_clear(&r[i]);
	carmy_reservation_clear(&x);

	/* Every refusal was counted, as the operator sees it: 50 + 5 + 1 +
	 * 5 new identities turned away. */
	{
		char ctl[256], cmd[640], line[1024];
		FILE *out;

		harness_path("tools/carmyctl", ctl, sizeof(ctl));
		snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' --json status",
			 ctl, d.socket);
		out = popen(cmd, "r");
		ck_assert_ptr_nonnull(out);
		ck_assert_ptr_nonnull(fgets(line, sizeof(line), out));
		ck_assert_int_eq(pclose(out), 0);
		ck_assert_msg(strstr(line, "\"capacity_refusals\":61}") != NULL,
			      "status: %s", line);
	}
}
END_TEST

START_TEST(test_completion_is_never_refused_for_lack_of_room)
{
	struct carmy_reservation r[CAP];
	uint8_t big[MAX_RESULT];

	for (int i = 0; i < CAP; i++) {
		r[i] = (struct carmy_reservation)CARMY_RESERVATION_INIT;
		ck_assert_int_eq(begin_n("full", i, &r[i]), CARMY_RESERVED);
	}
	expect_full("over", 3);
	for (int i = 0; i < CAP; i++) {
		memset(big, 0, sizeof(big));
		big[0] = (uint8_t)i;
		big[MAX_RESULT - 1] = 0xff;
		ck_assert_int_eq(carmy_complete(c, &r[i], CARMY_STATUS_COMPLETED,
						big, sizeof(big)), 0);
	}
	for (int i = 0; i < CAP; i++) {
		ck_assert_int_eq(begin_n("full", i, &r[i]), CARMY_REPLAY);
		ck_assert_uint_eq(r[i].result_len, MAX_RESULT);
		ck_assert_uint_eq(((uint8_t *)r[i].result)[0], i);
		ck_assert_uint_eq(((uint8_t *)r[i].result)[MAX_RESULT - 1], 0xff);
		carmy_reservation_clear(&r[i]);
	}
}
END_TEST

START_TEST(test_result_larger_than_max_result_is_recorded_as_failed)
{
	static const size_t sizes[] = { MAX_RESULT + 1, 4096, 1u << 20 };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	uint8_t *big = calloc(1, 1u << 20);

	ck_assert_ptr_nonnull(big);
	ck_assert_uint_eq(carmy_max_result(c), MAX_RESULT);
	/* The memory store: a begin never waits for carmyd to record it. */
	ck_assert_int_eq(carmy_durable(c), 0);
	for (int i = 0; i < 3; i++) {
		char exec[CARMY_EXECUTION_ID_LEN + 1];

		ck_assert_int_eq(begin_n("big", i, &r), CARMY_RESERVED);
		strcpy(exec, r.execution_id);
		ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, big,
						sizes[i]), CARMY_ERESULT_TOO_LARGE);
		/* Recorded, not dropped: the call is over. */
		ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "x", 1),
				 CARMY_ENOT_RESERVED);
		ck_assert_int_eq(carmy_release(c, &r), CARMY_ENOT_RESERVED);
		for (int k = 0; k < 2; k++) {
			ck_assert_int_eq(begin_n("big", i, &u), CARMY_REPLAY);
			ck_assert_str_eq(u.execution_id, exec);
			ck_assert_int_eq(u.status, CARMY_STATUS_FAILED);
			ck_assert_int_eq(u.result_code, CARMY_ERESULT_TOO_LARGE);
			ck_assert_uint_eq(u.result_len, 0);
		}
	}
	/* Exactly --max-result is fine. */
	ck_assert_int_eq(begin_n("edge", 0, &r), CARMY_RESERVED);
	memset(big, 'z', MAX_RESULT);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_TIMED_OUT, big,
					MAX_RESULT), 0);
	ck_assert_int_eq(begin_n("edge", 0, &u), CARMY_REPLAY);
	ck_assert_int_eq(u.status, CARMY_STATUS_TIMED_OUT);
	ck_assert_int_eq(u.result_code, 0);
	ck_assert_uint_eq(u.result_len, MAX_RESULT);
	ck_assert_mem_eq(u.result, big, MAX_RESULT);
	free(big);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
}
END_TEST

/*
 * Model-based: thousands of random reserves, releases and completions
 * against a table of CAP entries. The model says which identities hold an
 * entry; carmyd must agree on every call: a new identity is reserved while
 * fewer than CAP are held and refused once CAP are, every held one answers
 * as running or completed, and a released one is new again.
 */
#define MODEL_IDS 64
#define MODEL_OPS 3000

enum { M_FREE, M_RUNNING, M_DONE };

static void index_census(int *nfree, int *ntomb)
{
	struct shm_view v;

	*nfree = *ntomb = 0;
	ck_assert_int_eq(shm_map(d.segment, false, &v), 0);
	for (uint32_t b = 0; b < v.geo.nbuckets; b++) {
		unsigned st = SHM_W_STATE(__atomic_load_n(&v.buckets[b],
							   __ATOMIC_ACQUIRE));

		*nfree += st == SHM_FREE;
		*ntomb += st == SHM_TOMB;
	}
	shm_unmap(&v);
}

START_TEST(test_random_reserve_release_complete_keeps_capacity_exact)
{
	struct carmy_reservation held[MODEL_IDS];
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	int state[MODEL_IDS] = { 0 };
	unsigned seed = (unsigned)harness_now_ns();
	int nheld = 0, refused = 0, releases = 0;

	e2e_note("model seed %u", seed);
	for (int i = 0; i < MODEL_IDS; i++)
		held[i] = (struct carmy_reservation)CARMY_RESERVATION_INIT;
	for (int op = 0; op < MODEL_OPS; op++) {
		int i = rand_r(&seed) % MODEL_IDS;
		char rid[32];
		struct carmy_call call;
		int rc;

		snprintf(rid, sizeof(rid), "m%d", i);
		call = E2E_CALL("model", "s", rid);
		switch (state[i]) {
		case M_FREE:
			rc = carmy_begin(c, &call, &held[i]);
			/* Room may come back a tick late, but it must. */
			if (nheld < CAP && rc == CARMY_ECAPACITY) {
				int nfree, ntomb;

				rc = e2e_poll_begin(c, &call, &held[i],
						    CARMY_RESERVED, -1, 1500, NULL);
				index_census(&nfree, &ntomb);
				ck_assert_msg(rc == CARMY_RESERVED, "op %d: %s new "
					      "with %d of %d held: still %s after "
					      "1.5 s; the index has %d FREE and %d "
					      "TOMB buckets", op, rid, nheld, CAP,
					      carmy_errname(rc), nfree, ntomb);
			}
			if (nheld < CAP) {
				ck_assert_msg(rc == CARMY_RESERVED, "op %d: %s new "
					      "with %d of %d held: %s", op, rid,
					      nheld, CAP, carmy_errname(rc));
				state[i] = M_RUNNING;
				nheld++;
			} else {
				ck_assert_msg(rc == CARMY_ECAPACITY, "op %d: %s "
					      "with the table full: %s", op, rid,
					      carmy_errname(rc));
				refused++;
			}
			break;
		case M_RUNNING:
			rc = carmy_begin(c, &call, &r);
			ck_assert_msg(rc == CARMY_EUNCERTAIN &&
				      r.state == CARMY_STATE_RUNNING,
				      "op %d: %s running: %s", op, rid,
				      carmy_errname(rc));
			ck_assert_str_eq(r.execution_id, held[i].execution_id);
			/* Completed entries are forever: complete rarely,
			 * so that the table keeps turning over for long. */
			if (rand_r(&seed) % 80 == 0) {
				ck_assert_int_eq(carmy_complete(c, &held[i],
						CARMY_STATUS_COMPLETED, rid,
						strlen(rid)), 0);
				state[i] = M_DONE;
			} else {
				ck_assert_int_eq(carmy_release(c, &held[i]), 0);
				state[i] = M_FREE;
				nheld--;
				releases++;
			}
			break;
		case M_DONE:
			rc = carmy_begin(c, &call, &r);
			ck_assert_msg(rc == CARMY_REPLAY, "op %d: %s done: %s",
				      op, rid, carmy_errname(rc));
			ck_assert_str_eq(r.result, rid);
			break;
		}
	}
	e2e_note("model: %d releases, %d refusals at capacity, %d held at "
		 "the end", releases, refused, nheld);
	for (int i = 0; i < MODEL_IDS; i++)
		carmy_reservation_clear(&held[i]);
	carmy_reservation_clear(&r);
}
END_TEST

static Suite *capacity_suite(void)
{
	Suite *s = suite_create("capacity");
	TCase *tc = tcase_create("capacity");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_capacity_plus_one_is_refused_and_nothing_is_evicted);
	tcase_add_test(tc, test_completion_is_never_refused_for_lack_of_room);
	tcase_add_test(tc, test_result_larger_than_max_result_is_recorded_as_failed);
	tcase_add_test(tc, test_random_reserve_release_complete_keeps_capacity_exact);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(capacity_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
