/*
 * check_restart.c - carmyd is killed with -9 and started again on the same
 * segment: every completed entry replays with its execution id, status and
 * result; entries whose owners died or were cut off meanwhile are
 * EXECUTION_UNCERTAIN (interrupted); new identities work; and a client
 * connected before the restart can no longer record anything.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

#define NDONE 6

static const char *const opts[] = { "--capacity", "64", "--max-result",
				    "256", NULL };
static struct carmyd_proc d;
/* The handles a test opens, closed by teardown even if the test failed
 * (without fork, a failed assertion skips the rest of the test). */
static carmy_t *old, *c;

static void setup(void)
{
	e2e_start(&d, opts);
}

static void teardown(void)
{
	carmy_close(old);
	carmy_close(c);
	old = c = NULL;
	e2e_stop(&d);
}

struct done {
	char rid[32];
	int status;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	uint8_t result[256];
	size_t len;
};

static void record_done(carmy_t *h, struct done *dn)
{
	static const int statuses[] = { CARMY_STATUS_COMPLETED,
		CARMY_STATUS_FAILED, CARMY_STATUS_TIMED_OUT,
		CARMY_STATUS_CANCELLED };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	for (int i = 0; i < NDONE; i++) {
		struct carmy_call call;

		snprintf(dn[i].rid, sizeof(dn[i].rid), "done-%d", i);
		call = E2E_CALL("p", "s", dn[i].rid);
		dn[i].status = statuses[i % 4];
		dn[i].len = i == NDONE - 1 ? 256 : (size_t)(i * 7);
		for (size_t k = 0; k < dn[i].len; k++)
			dn[i].result[k] = (uint8_t)(k % 3 ? k + i : 0);
		ck_assert_int_eq(carmy_begin(h, &call, &r), CARMY_RESERVED);
		strcpy(dn[i].exec, r.execution_id);
		ck_assert_int_eq(carmy_complete(h, &r, dn[i].status, dn[i].result,
						dn[i].len), 0);
	}
	carmy_reservation_clear(&r);
}

static void expect_done(carmy_t *h, const struct done *dn)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	for (int i = 0; i < NDONE; i++) {
		struct carmy_call call = E2E_CALL("p", "s", dn[i].rid);
		int rc = carmy_begin(h, &call, &r);

		ck_assert_msg(rc == CARMY_REPLAY, "%s after restart: %s",
			      dn[i].rid, carmy_errname(rc));
		ck_assert_str_eq(r.execution_id, dn[i].exec);
		ck_assert_int_eq(r.status, dn[i].status);
		ck_assert_int_eq(r.result_code, 0);
		ck_assert_uint_eq(r.result_len, dn[i].len);
		if (dn[i].len > 0)
			ck_assert_mem_eq(r.result, dn[i].result, dn[i].len);
	}
	carmy_reservation_clear(&r);
}

static void expect_interrupted(carmy_t *h, const struct carmy_call *call,
			       const char *exec)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	int rc = e2e_poll_begin(h, call, &r, CARMY_EUNCERTAIN,
				CARMY_STATE_INTERRUPTED, 3000, NULL);

	ck_assert_msg(rc == CARMY_EUNCERTAIN && r.state == CARMY_STATE_INTERRUPTED,
		      "after restart: %s (state %s)", carmy_errname(rc),
		      carmy_state_name(r.state));
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
}

/* A new identity can be reserved, completed and replayed. */
static void expect_new_works(carmy_t *h, const char *rid)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", rid);

	ck_assert_int_eq(carmy_begin(h, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(h, &r, CARMY_STATUS_COMPLETED, rid,
					strlen(rid)), 0);
	ck_assert_int_eq(carmy_begin(h, &call, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.result, rid);
	carmy_reservation_clear(&r);
}

START_TEST(test_restart_keeps_completed_results_and_interrupts_running)
{
	struct done dn[NDONE];
	struct carmy_call running = E2E_CALL("p", "s", "running");
	struct carmy_call released = E2E_CALL("p", "s", "released");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct e2e_child ch;
	carmy_t *x = NULL;
	char released_exec[CARMY_EXECUTION_ID_LEN + 1];

	c = e2e_connect(&d);
	record_done(c, dn);
	ck_assert_int_eq(carmy_begin(c, &released, &r), CARMY_RESERVED);
	strcpy(released_exec, r.execution_id);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	e2e_child_reserve(&ch, d.socket, &running, E2E_HOLD);
	carmy_close(c);
	c = NULL;

	e2e_kill9(&d);
	/* The owner dies while no carmyd is watching. */
	e2e_child_reap(&ch);
	/* Meanwhile there is no service, and nothing may run. */
	ck_assert_int_eq(carmy_connect(&x, d.socket), CARMY_EUNAVAILABLE);

	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	expect_done(c, dn);
	expect_interrupted(c, &running, ch.exec);
	/* A released identity was never run: it is new again. */
	ck_assert_int_eq(carmy_begin(c, &released, &r), CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, released_exec);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "rel", 3), 0);
	expect_new_works(c, "after-first");
	carmy_close(c);
	c = NULL;

	/* And once more: nothing completed is ever lost. */
	e2e_kill9(&d);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	expect_done(c, dn);
	expect_interrupted(c, &running, ch.exec);
	ck_assert_int_eq(carmy_begin(c, &released, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.result, "rel");
	expect_new_works(c, "after-second");
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_client_connected_across_restart_is_disconnected)
{
	struct carmy_call held = E2E_CALL("p", "s", "held");
	struct carmy_call held2 = E2E_CALL("p", "s", "held-2");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation r2 = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	int rc;

	old = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(old, &held, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_begin(old, &held2, &r2), CARMY_RESERVED);
	e2e_kill9(&d);
	e2e_restart(&d, opts);

	/* Its process is alive, but its connection is not: the entries are
	 * uncertain, and the old handle can neither give them back nor
	 * record a result for them, and is told why. */
	c = e2e_connect(&d);
	expect_interrupted(c, &held, r.execution_id);
	expect_interrupted(c, &held2, r2.execution_id);
	ck_assert_int_eq(carmy_release(old, &r2), CARMY_EDISCONNECTED);
	rc = carmy_complete(old, &r, CARMY_STATUS_COMPLETED, "late", 4);
	ck_assert_msg(rc == CARMY_EDISCONNECTED || rc == CARMY_EUNAVAILABLE,
		      "complete on a handle from before the restart: %s",
		      carmy_errname(rc));
	ck_assert_int_ne(carmy_begin(old, &held, &u), CARMY_RESERVED);
	ck_assert_int_eq(carmy_begin(c, &held, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_INTERRUPTED);
	expect_new_works(c, "fresh");
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&r2);
	carmy_reservation_clear(&u);
}
END_TEST

/* A handle from before the restart that has not noticed yet may still get a
 * reservation out of the shared table; then its result cannot be recorded,
 * and the entry must end uncertain, never free for a second run. */
START_TEST(test_reservation_by_a_handle_from_before_restart_ends_uncertain)
{
	struct carmy_call call = E2E_CALL("p", "s", "late-begin");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	int rc;

	old = e2e_connect(&d);
	e2e_kill9(&d);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	rc = carmy_begin(old, &call, &r);
	if (rc == CARMY_RESERVED) {
		char exec[CARMY_EXECUTION_ID_LEN + 1];

		strcpy(exec, r.execution_id);
		rc = carmy_complete(old, &r, CARMY_STATUS_COMPLETED, "x", 1);
		ck_assert_msg(rc == CARMY_EDISCONNECTED || rc == CARMY_EUNAVAILABLE,
			      "a stale handle recorded a result: %s",
			      carmy_errname(rc));
		expect_interrupted(c, &call, exec);
		e2e_note("a stale handle was given a reservation; it ended "
			 "uncertain");
	} else {
		ck_assert_msg(rc == CARMY_EDISCONNECTED || rc == CARMY_EUNAVAILABLE,
			      "stale handle's begin: %s", carmy_errname(rc));
		e2e_note("a stale handle's begin was refused: %s",
			 carmy_errname(rc));
		expect_new_works(c, "late-begin");
	}
	ck_assert_int_ne(carmy_begin(c, &call, &u), CARMY_RESERVED);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
}
END_TEST

/* While carmyd is down, a handle connected before may still be given a
 * reservation from the shared table. It can never record a result, and once
 * carmyd is back the entry is uncertain: the call never runs twice and its
 * first run is never forgotten. */
START_TEST(test_begin_while_carmyd_is_down_fails_closed_but_replays)
{
	struct carmy_call done = E2E_CALL("p", "s", "done-before");
	struct carmy_call call = E2E_CALL("p", "s", "while-down");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	old = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(old, &done, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED, "x", 1), 0);
	e2e_kill9(&d);
	/* Nobody could record a new call: it must not start. */
	ck_assert_int_eq(carmy_begin(old, &call, &r), CARMY_EUNAVAILABLE);
	/* A finished call replays from the segment without carmyd. */
	ck_assert_int_eq(carmy_begin(old, &done, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, exec);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	expect_new_works(c, "while-down");
	carmy_reservation_clear(&r);
}
END_TEST

static Suite *restart_suite(void)
{
	Suite *s = suite_create("restart");
	TCase *tc = tcase_create("restart");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_restart_keeps_completed_results_and_interrupts_running);
	tcase_add_test(tc, test_client_connected_across_restart_is_disconnected);
	tcase_add_test(tc, test_reservation_by_a_handle_from_before_restart_ends_uncertain);
	tcase_add_test(tc, test_begin_while_carmyd_is_down_fails_closed_but_replays);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(restart_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
