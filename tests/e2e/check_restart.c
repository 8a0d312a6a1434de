/*
 * check_restart.c - carmyd is killed with -9 and started again on the same
 * segment: every completed entry replays with its execution id, status and
 * result; entries whose owners died or were cut off meanwhile are
 * EXECUTION_UNCERTAIN (interrupted); new identities work. Without a grace
 * period (--grace 0) a client connected before the restart can no longer
 * record anything; with one, the same process gets its reservations back
 * and completes them, for as long as it runs: an owner whose process is
 * gone is uncertain at once, one that exits later as it exits, one that
 * came back and closes its handle as it closes, one that closes its handle
 * while carmyd is down at once, and one that does not come back once the
 * period ends.
 */
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

#define NDONE 6

static const char *const opts[] = { "--capacity", "64", "--max-result",
				    "256", "--grace", "0", NULL };
/* A grace period no test waits for: a returning owner is always in time. */
static const char *const opts_long_grace[] = { "--capacity", "64",
	"--max-result", "256", "--grace", "60", NULL };
#define SHORT_GRACE_S 2
static const char *const opts_short_grace[] = { "--capacity", "64",
	"--max-result", "256", "--grace", "2", NULL };
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

/* carmyd started again with a long --grace, and old connected to it with
 * call reserved in r: where the tests of a client that sees carmyd
 * restart begin. */
static void reserve_after_restart(const struct carmy_call *call,
				  struct carmy_reservation *r)
{
	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	old = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(old, call, r), CARMY_RESERVED);
}

/* A handle whose requests give up on an absent carmyd after 100 ms. */
static carmy_t *connect_impatient(void)
{
	carmy_t *h;

	ck_assert_int_eq(setenv("CARMY_RECONNECT_MS", "100", 1), 0);
	h = e2e_connect(&d);
	ck_assert_int_eq(unsetenv("CARMY_RECONNECT_MS"), 0);
	return h;
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
	ck_assert_msg(rc == CARMY_EDISCONNECTED,
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

/* A handle from before the restart reconnects by itself on its next call.
 * Without a grace period it does so under a new owner id: a new call is
 * reserved and recorded as usual, and runs once. */
START_TEST(test_handle_from_before_restart_reconnects_for_new_calls)
{
	struct carmy_call call = E2E_CALL("p", "s", "late-begin");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;

	old = e2e_connect(&d);
	e2e_kill9(&d);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(old, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED, "x",
					1), 0);
	ck_assert_int_eq(carmy_begin(c, &call, &u), CARMY_REPLAY);
	ck_assert_str_eq(u.execution_id, r.execution_id);
	ck_assert_int_eq(carmy_begin(old, &call, &u), CARMY_REPLAY);
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

/*
 * What the README says of a carmyd that is gone: a process that was
 * connected before replays finished calls from the segment it has mapped,
 * until one of its requests finds carmyd gone on the socket; from then on
 * each call tries to connect again first, and fails closed, replays too,
 * as a process that starts now (every carmy-run) does at its connect. Once
 * carmyd is back, replays are answered again.
 */
START_TEST(test_while_carmyd_is_down_only_a_handle_connected_before_replays)
{
	struct carmy_call done = E2E_CALL("p", "s", "done-before");
	struct carmy_call held = E2E_CALL("p", "s", "held-before");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation h = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	carmy_t *late = (carmy_t *)&late;

	old = connect_impatient();
	ck_assert_int_eq(carmy_begin(old, &done, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED, "x", 1),
			 0);
	ck_assert_int_eq(carmy_begin(old, &held, &h), CARMY_RESERVED);
	e2e_kill9(&d);

	/* A new process cannot connect. */
	ck_assert_int_eq(carmy_connect(&late, d.socket), CARMY_EUNAVAILABLE);
	ck_assert_ptr_null(late);
	/* The handle from before replays... */
	ck_assert_int_eq(carmy_begin(old, &done, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, exec);
	/* ...until a request of its finds no carmyd (the reservation it
	 * completes stays live: carmyd may yet come back)... */
	ck_assert_int_eq(carmy_complete(old, &h, CARMY_STATUS_COMPLETED, "y", 1),
			 CARMY_EUNAVAILABLE);
	/* ...and then it fails closed, a replay as much as a new call. */
	ck_assert_int_eq(carmy_begin(old, &done, &r), CARMY_EUNAVAILABLE);

	e2e_restart(&d, opts);
	ck_assert_int_eq(carmy_begin(old, &done, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, exec);
	ck_assert_uint_eq(r.result_len, 1);
	ck_assert_mem_eq(r.result, "x", 1);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&h);
}
END_TEST

/* A completion that finds carmyd away for longer than the handle waits for
 * it (a restart with a long load) is told DAEMON_UNAVAILABLE, not
 * DISCONNECTED: the reservation is live, and the same completion sent once
 * carmyd is back records the result. So do a release and an abandon. */
START_TEST(test_a_completion_while_carmyd_is_away_stays_live)
{
	struct carmy_call done = E2E_CALL("p", "s", "completed-late");
	struct carmy_call freed = E2E_CALL("p", "s", "released-late");
	struct carmy_call given = E2E_CALL("p", "s", "abandoned-late");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation f = CARMY_RESERVATION_INIT;
	struct carmy_reservation g = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	old = connect_impatient();
	ck_assert_int_eq(carmy_begin(old, &done, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_begin(old, &freed, &f), CARMY_RESERVED);
	ck_assert_int_eq(carmy_begin(old, &given, &g), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	e2e_kill9(&d);

	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED,
					"late", 4), CARMY_EUNAVAILABLE);
	ck_assert_int_eq(carmy_release(old, &f), CARMY_EUNAVAILABLE);
	ck_assert_int_eq(carmy_abandon(old, &g), CARMY_EUNAVAILABLE);
	/* Not sent, so not settled: asked again, the same. */
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED,
					"late", 4), CARMY_EUNAVAILABLE);

	e2e_restart(&d, opts_long_grace);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &done, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED,
					"late", 4), 0);
	ck_assert_int_eq(carmy_begin(c, &done, &u), CARMY_REPLAY);
	ck_assert_str_eq(u.execution_id, exec);
	ck_assert_uint_eq(u.result_len, 4);
	ck_assert_mem_eq(u.result, "late", 4);
	ck_assert_int_eq(carmy_release(old, &f), 0);
	ck_assert_int_eq(carmy_begin(c, &freed, &u), CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &u), 0);
	ck_assert_int_eq(carmy_abandon(old, &g), 0);
	ck_assert_int_eq(carmy_begin(c, &given, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_INTERRUPTED);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&f);
	carmy_reservation_clear(&g);
	carmy_reservation_clear(&u);
}
END_TEST

/* Told DAEMON_UNAVAILABLE while carmyd was away, a completion is told
 * DISCONNECTED once carmyd is back without the handle's calls (--grace 0:
 * none held): the entry is uncertain, and no retry can record it. */
START_TEST(test_a_completion_away_then_not_held_is_disconnected)
{
	struct carmy_call call = E2E_CALL("p", "s", "away-not-held");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	old = connect_impatient();
	ck_assert_int_eq(carmy_begin(old, &call, &r), CARMY_RESERVED);
	e2e_kill9(&d);
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED,
					"late", 4), CARMY_EUNAVAILABLE);
	e2e_restart(&d, opts);
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED,
					"late", 4), CARMY_EDISCONNECTED);
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED,
					"late", 4), CARMY_EDISCONNECTED);
	c = e2e_connect(&d);
	expect_interrupted(c, &call, r.execution_id);
	carmy_reservation_clear(&r);
}
END_TEST

/* carmyd comes back on another segment at the same socket (its segment
 * was removed, and it runs with another --max-result): what the handle
 * reserved in the old one is served by nobody, for good. A completion is
 * told DISCONNECTED, not DAEMON_UNAVAILABLE: sending it again could never
 * record it. */
START_TEST(test_a_completion_to_a_carmyd_on_another_segment_is_disconnected)
{
	static const char *const bigger[] = { "--capacity", "64",
		"--max-result", "512", "--grace", "600", NULL };
	struct carmy_call call = E2E_CALL("p", "s", "other-segment");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	old = connect_impatient();
	ck_assert_int_eq(carmy_begin(old, &call, &r), CARMY_RESERVED);
	e2e_kill9(&d);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	e2e_restart(&d, bigger);
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED,
					"late", 4), CARMY_EDISCONNECTED);
	ck_assert_int_eq(carmy_release(old, &r), CARMY_EDISCONNECTED);
	carmy_reservation_clear(&r);
}
END_TEST

/* Within the grace period the process that held a reservation gets it back
 * by itself and records its result; meanwhile others see it running. */
START_TEST(test_owner_back_within_grace_completes_its_call)
{
	struct carmy_call held = E2E_CALL("p", "s", "held-across");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	reserve_after_restart(&held, &r);
	strcpy(exec, r.execution_id);

	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &held, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(u.execution_id, exec);

	/* The tool finished while carmyd was away: its result is kept. */
	ck_assert_int_eq(carmy_complete(old, &r, CARMY_STATUS_COMPLETED,
					"kept", 4), 0);
	ck_assert_int_eq(carmy_begin(c, &held, &u), CARMY_REPLAY);
	ck_assert_str_eq(u.execution_id, exec);
	ck_assert_uint_eq(u.result_len, 4);
	ck_assert_mem_eq(u.result, "kept", 4);
	/* And the handle works on. */
	expect_new_works(old, "after-resume");
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
}
END_TEST

/* An owner that does not come back is running until the grace period ends,
 * then uncertain; asking late gets it nothing back. */
START_TEST(test_owner_not_back_is_uncertain_once_grace_ends)
{
	struct carmy_call call = E2E_CALL("p", "s", "not-back");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct e2e_child ch;
	uint64_t t0;
	int rc;

	e2e_kill9(&d);
	e2e_restart(&d, opts_short_grace);
	e2e_child_reserve(&ch, d.socket, &call, E2E_HOLD);
	e2e_kill9(&d);
	t0 = harness_now_ns();
	e2e_restart(&d, opts_short_grace);
	c = e2e_connect(&d);
	rc = e2e_poll_begin(c, &call, &r, CARMY_EUNCERTAIN,
			    CARMY_STATE_INTERRUPTED,
			    (SHORT_GRACE_S + 8) * 1000, NULL);
	ck_assert_msg(rc == CARMY_EUNCERTAIN &&
			      r.state == CARMY_STATE_INTERRUPTED,
		      "after the grace period: %s (%s)", carmy_errname(rc),
		      carmy_state_name(r.state));
	ck_assert_str_eq(r.execution_id, ch.exec);
	/* Never before the period was over. */
	ck_assert_msg(e2e_ms_since(t0) >= SHORT_GRACE_S * 1000.0,
		      "interrupted %.0f ms after the restart, grace %d s",
		      e2e_ms_since(t0), SHORT_GRACE_S);
	e2e_note("uncertain %.0f ms after the restart (grace %d s)",
		 e2e_ms_since(t0), SHORT_GRACE_S);
	e2e_child_reap(&ch);
	carmy_reservation_clear(&r);
}
END_TEST

/* A handle closed after the restart without coming back (a long-lived
 * process that gave up on it, as the gateway does): its running calls are
 * uncertain at once, not at the end of the grace period. */
START_TEST(test_a_handle_closed_without_coming_back_leaves_its_calls_uncertain)
{
	struct carmy_call held = E2E_CALL("p", "s", "given-up");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	reserve_after_restart(&held, &r);
	strcpy(exec, r.execution_id);

	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &held, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);
	carmy_close(old);
	old = NULL;
	ck_assert_int_eq(carmy_begin(c, &held, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_INTERRUPTED);
	ck_assert_str_eq(u.execution_id, exec);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
}
END_TEST

/* The owner id of the process holding a reservation, read from the
 * segment's tickets (the high half of a ticket is its claimer's pid). */
static uint32_t owner_of(const struct carmyd_proc *p, pid_t pid)
{
	struct shm_view v;
	uint32_t owner = 0;

	ck_assert_int_eq(shm_map(p->segment, false, &v), 0);
	for (uint32_t e = 0; e < v.geo.capacity; e++) {
		uint64_t t = v.tickets[e];

		if (SHM_T_PID(t) == (uint32_t)pid &&
		    SHM_T_WHAT(t) >= SHM_OWNER_MIN)
			owner = SHM_T_WHAT(t);
	}
	shm_unmap(&v);
	return owner;
}

/* HELLO asking for owner back (0: a new one), from this process, on a
 * connection left open; its reply in *m. Returns the connection. */
static int hello_as(const char *path, uint32_t owner, struct wire_msg *m)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	msgpack_sbuffer sb;
	uint8_t buf[512];
	size_t have = 0;
	long n = 0;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	strcpy(sa.sun_path, path);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	msgpack_sbuffer_init(&sb);
	ck_assert_int_eq(wire_put_hello(&sb, shm_layout_signature(), owner, 1),
			 0);
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	msgpack_sbuffer_destroy(&sb);
	while (n == 0) {
		ssize_t got = e2e_read_full(fd, buf + have, 1, HARNESS_WAIT_MS);

		ck_assert_int_eq(got, 0);
		have++;
		n = wire_scan(buf, have, sizeof(buf));
		ck_assert_int_ge(n, 0);
	}
	ck_assert_int_eq(wire_decode(buf, have, 0, m), 0);
	ck_assert_int_eq(m->type, WIRE_HELLO);
	return fd;
}

/* HELLO asking for owner back, from this process; the reply's flags. */
static uint32_t ask_back(const char *path, uint32_t owner)
{
	struct wire_msg m;

	close(hello_as(path, owner, &m));
	return m.u.hello_ok.flags;
}

/* An owner id of the previous carmyd is given back once: while that
 * connection lives, a second HELLO asking for it gets a new id. Two
 * connections never act as one owner (one could complete the other's
 * calls, and the first to hang up would not make the other's uncertain).
 * An id that held nothing is not held: nothing to come back for. */
START_TEST(test_an_owner_id_is_given_back_to_one_connection)
{
	struct carmy_call call = E2E_CALL("p", "s", "one-connection");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct wire_msg m;
	uint32_t owner, idle;
	int fd;

	fd = hello_as(d.socket, 0, &m);
	idle = m.u.hello_ok.owner;
	old = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(old, &call, &r), CARMY_RESERVED);
	owner = owner_of(&d, getpid());
	ck_assert_uint_ge(owner, SHM_OWNER_MIN);
	ck_assert_uint_ne(owner, idle);
	e2e_kill9(&d);
	close(fd);
	e2e_restart(&d, opts_long_grace);
	ck_assert_uint_eq(ask_back(d.socket, idle) & WIRE_F_RESUMED, 0);
	fd = hello_as(d.socket, owner, &m);
	ck_assert_uint_ne(m.u.hello_ok.flags & WIRE_F_RESUMED, 0);
	ck_assert_uint_eq(m.u.hello_ok.owner, owner);
	ck_assert_uint_eq(ask_back(d.socket, owner) & WIRE_F_RESUMED, 0);
	close(fd);
	carmy_reservation_clear(&r);
}
END_TEST

/* The running entries of a client whose process is gone when carmyd comes
 * back are uncertain at once, however long --grace is: it cannot come
 * back. carmyd's start-up sweep, before it is ready, made them so. */
START_TEST(test_a_client_gone_during_the_restart_is_uncertain_at_once)
{
	struct carmy_call call = E2E_CALL("p", "s", "gone-meanwhile");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct e2e_child ch;

	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	e2e_child_reserve(&ch, d.socket, &call, E2E_HOLD);
	e2e_kill9(&d);
	e2e_child_reap(&ch);
	e2e_restart(&d, opts_long_grace);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_msg(r.state == CARMY_STATE_INTERRUPTED,
		      "a gone client's call: %s", carmy_state_name(r.state));
	ck_assert_str_eq(r.execution_id, ch.exec);
	carmy_reservation_clear(&r);
}
END_TEST

/* Wait until call, held by a client of the previous carmyd that has just
 * been reaped, is uncertain: carmyd looked at the held clients after that
 * (it lets go of all it finds gone in one look) and swept. */
static void await_let_go(const struct carmy_call *call, const char *exec)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	int rc = e2e_poll_begin(c, call, &r, CARMY_EUNCERTAIN,
				CARMY_STATE_INTERRUPTED, 30000, NULL);

	ck_assert_msg(rc == CARMY_EUNCERTAIN &&
			      r.state == CARMY_STATE_INTERRUPTED,
		      "after its held client exited: %s (%s)",
		      carmy_errname(rc), carmy_state_name(r.state));
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
}

/* A client of the previous carmyd whose process still runs keeps its call
 * running, for its result, while it runs; when it exits without coming
 * back, the call is uncertain then, not at the end of --grace (60 s;
 * 30 s are awaited). */
START_TEST(test_a_held_client_that_exits_is_uncertain_as_it_exits)
{
	struct carmy_call call = E2E_CALL("p", "s", "held-then-exits");
	struct carmy_call first = E2E_CALL("p", "s", "held-exits-first");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct e2e_child ch, early;

	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	e2e_child_reserve(&ch, d.socket, &call, E2E_HOLD);
	e2e_child_reserve(&early, d.socket, &first, E2E_HOLD);
	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(r.execution_id, ch.exec);
	/* The other one exits first: once its call is uncertain, carmyd
	 * has looked at both since, and this one is still held. */
	e2e_child_reap(&early);
	await_let_go(&first, early.exec);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_RUNNING);
	e2e_child_reap(&ch);
	await_let_go(&call, ch.exec);
	carmy_reservation_clear(&r);
}
END_TEST

/* A client that came back is a client like any other: when it closes its
 * handle, the calls it did not come back for are uncertain, though its
 * process runs on (a gateway's handle, given up on and closed). */
START_TEST(test_a_client_back_then_closed_leaves_the_rest_uncertain)
{
	struct carmy_call a = E2E_CALL("p", "s", "back-a");
	struct carmy_call b = E2E_CALL("p", "s", "back-b");
	struct carmy_reservation ra = CARMY_RESERVATION_INIT;
	struct carmy_reservation rb = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	char exec_b[CARMY_EXECUTION_ID_LEN + 1];
	int rc;

	reserve_after_restart(&a, &ra);
	ck_assert_int_eq(carmy_begin(old, &b, &rb), CARMY_RESERVED);
	strcpy(exec_b, rb.execution_id);
	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	ck_assert_int_eq(carmy_complete(old, &ra, CARMY_STATUS_COMPLETED,
					"a", 1), 0);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &b, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);
	carmy_close(old);
	old = NULL;
	rc = e2e_poll_begin(c, &b, &u, CARMY_EUNCERTAIN,
			    CARMY_STATE_INTERRUPTED, 30000, NULL);
	ck_assert_msg(rc == CARMY_EUNCERTAIN &&
			      u.state == CARMY_STATE_INTERRUPTED,
		      "after the handle that came back closed: %s (%s)",
		      carmy_errname(rc), carmy_state_name(u.state));
	ck_assert_str_eq(u.execution_id, exec_b);
	ck_assert_int_eq(carmy_begin(c, &a, &u), CARMY_REPLAY);
	carmy_reservation_clear(&ra);
	carmy_reservation_clear(&rb);
	carmy_reservation_clear(&u);
}
END_TEST

/* A handle closed while carmyd is down, before it noticed (it sent
 * nothing since): no carmyd saw it close, and the one that comes back
 * would hold its calls while this process runs. The handle makes them
 * uncertain itself. */
START_TEST(test_a_handle_closed_while_carmyd_is_down_leaves_its_calls_uncertain)
{
	struct carmy_call call = E2E_CALL("p", "s", "closed-while-down");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	reserve_after_restart(&call, &r);
	strcpy(exec, r.execution_id);
	e2e_kill9(&d);
	carmy_close(old);
	old = NULL;
	e2e_restart(&d, opts_long_grace);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &call, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_INTERRUPTED);
	ck_assert_str_eq(u.execution_id, exec);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
}
END_TEST

/* Another process cannot take a reservation's owner id back: carmyd gives
 * it only to the pid on its tickets. */
START_TEST(test_only_the_same_process_gets_its_owner_back)
{
	struct carmy_call call = E2E_CALL("p", "s", "not-yours");
	struct carmy_call witness = E2E_CALL("p", "s", "not-yours-witness");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct e2e_child ch, other;
	uint32_t owner;

	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	e2e_child_reserve(&ch, d.socket, &call, E2E_HOLD);
	e2e_child_reserve(&other, d.socket, &witness, E2E_HOLD);
	owner = owner_of(&d, ch.pid);
	ck_assert_uint_ge(owner, SHM_OWNER_MIN);
	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	ck_assert_uint_eq(ask_back(d.socket, owner) & WIRE_F_RESUMED, 0);
	/* An id nobody held is not handed out either. */
	ck_assert_uint_eq(ask_back(d.socket, owner + 1000) & WIRE_F_RESUMED, 0);
	/* Refused, it stays the child's: running, not swept, also after
	 * carmyd let go of another client (and swept) since. */
	c = e2e_connect(&d);
	e2e_child_reap(&other);
	await_let_go(&witness, other.exec);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(r.execution_id, ch.exec);
	e2e_child_reap(&ch);
	carmy_reservation_clear(&r);
}
END_TEST

/* A completion and a release carmyd recorded before it died, their answers
 * lost, as the last of the handle's calls: the carmyd that comes back
 * holds no owner without running entries, so the handle gets a new id,
 * and the segment says what was done. (A copy of each reservation, made
 * before it was completed or released, stands for one whose answer never
 * came: the library cannot tell the two apart.) Another result than the
 * one recorded is not taken for it. */
START_TEST(test_a_completion_whose_answer_was_lost_is_found_recorded)
{
	struct carmy_call a = E2E_CALL("p", "s", "lost-answer-a");
	struct carmy_call b = E2E_CALL("p", "s", "lost-answer-b");
	struct carmy_reservation ra = CARMY_RESERVATION_INIT;
	struct carmy_reservation rb = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	struct carmy_reservation ca, ca2, cb;

	reserve_after_restart(&a, &ra);
	ck_assert_int_eq(carmy_begin(old, &b, &rb), CARMY_RESERVED);
	ca = ra;
	ca2 = ra;
	cb = rb;
	ck_assert_int_eq(carmy_complete(old, &ra, CARMY_STATUS_COMPLETED,
					"done", 4), 0);
	ck_assert_int_eq(carmy_release(old, &rb), 0);
	e2e_kill9(&d);
	e2e_restart(&d, opts_long_grace);
	ck_assert_int_eq(carmy_complete(old, &ca2, CARMY_STATUS_COMPLETED,
					"other", 5), CARMY_EDISCONNECTED);
	ck_assert_int_eq(carmy_complete(old, &ca, CARMY_STATUS_COMPLETED,
					"done", 4), 0);
	ck_assert_int_eq(carmy_release(old, &cb), 0);
	/* Both done with: no longer live reservations. */
	ck_assert_int_eq(carmy_complete(old, &ca, CARMY_STATUS_COMPLETED,
					"done", 4), CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_release(old, &cb), CARMY_ENOT_RESERVED);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &a, &u), CARMY_REPLAY);
	ck_assert_mem_eq(u.result, "done", 4);
	ck_assert_int_eq(carmy_begin(c, &b, &u), CARMY_RESERVED);
	carmy_reservation_clear(&u);
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
	tcase_add_test(tc, test_handle_from_before_restart_reconnects_for_new_calls);
	tcase_add_test(tc, test_begin_while_carmyd_is_down_fails_closed_but_replays);
	tcase_add_test(tc, test_while_carmyd_is_down_only_a_handle_connected_before_replays);
	tcase_add_test(tc, test_a_completion_while_carmyd_is_away_stays_live);
	tcase_add_test(tc, test_a_completion_away_then_not_held_is_disconnected);
	tcase_add_test(tc, test_a_completion_to_a_carmyd_on_another_segment_is_disconnected);
	tcase_add_test(tc, test_owner_back_within_grace_completes_its_call);
	tcase_add_test(tc, test_owner_not_back_is_uncertain_once_grace_ends);
	tcase_add_test(tc, test_a_handle_closed_without_coming_back_leaves_its_calls_uncertain);
	tcase_add_test(tc, test_only_the_same_process_gets_its_owner_back);
	tcase_add_test(tc, test_an_owner_id_is_given_back_to_one_connection);
	tcase_add_test(tc, test_a_client_gone_during_the_restart_is_uncertain_at_once);
	tcase_add_test(tc, test_a_held_client_that_exits_is_uncertain_as_it_exits);
	tcase_add_test(tc, test_a_client_back_then_closed_leaves_the_rest_uncertain);
	tcase_add_test(tc, test_a_handle_closed_while_carmyd_is_down_leaves_its_calls_uncertain);
	tcase_add_test(tc, test_a_completion_whose_answer_was_lost_is_found_recorded);
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
