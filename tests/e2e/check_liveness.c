/*
 * check_liveness.c - one word of the segment cannot stop every new call.
 *
 * Clients read carmyd's liveness from sh_alive with one load, and may write
 * anywhere in the segment. A client that zeroes that word, or sets its
 * FUTEX_OWNER_DIED bit, or holds buckets BLOCKED, makes every new call fail
 * DAEMON_UNAVAILABLE while carmyd runs; carmyd's 1-second check notices,
 * logs it once (not once a second while a client keeps at it) and puts it
 * right, so a real client's next calls go through within seconds and
 * `carmyctl status` says carmyd is up. And carmyd gone, however it went,
 * reads "no carmyd" at once.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

static struct carmyd_proc d;
static carmy_t *c;
static struct shm_view v;
/* carmyd's log, at debug level: what it did that no answer shows. */
static char logdir[64], logpath[96];

/* What carmyd's check logs when it puts each right (daemon/store.c). */
#define ALIVE_FIXED "liveness word held"
#define ALIVE_AGAIN "liveness word was written over again"
#define BUCKETS_FIXED "with no reclaim of ours in flight"
#define BUCKETS_AGAIN "buckets were BLOCKED by clients again"
/* Logged at debug level at the end of each pass of carmyd's tick over the
 * table: here (64 entries) a pass is ten 100 ms ticks, the one whose 1 s
 * check puts the liveness word and header back among them; so between two
 * such lines came a check and a whole pass over the buckets. */
#define TICKED "the tick's pass over the table is done"

static const char *const opts[] = { "--capacity", "64", "--max-result",
				    "256", "--grace", "0", "--log-level",
				    "debug", "--log-file", logpath, NULL };

static void setup(void)
{
	strcpy(logdir, "/tmp/carmy-liveness.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(logdir));
	snprintf(logpath, sizeof(logpath), "%s/carmyd.log", logdir);
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(shm_map(d.segment, true, &v), 0);
}

static void teardown(void)
{
	carmy_close(c);
	c = NULL;
	shm_unmap(&v);
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

/* Wait for carmyd to end ticks - 1 more passes over the table (TICKED). */
static void await_checks(int ticks)
{
	ck_assert_msg(await_logged(TICKED, logged(TICKED) + ticks - 1, 15000),
		      "carmyd did not tick %d times within 15 s", ticks);
}

static uint32_t *alive_word(void)
{
	return &shm_header(&v)->sh_alive;
}

/* A new call goes through within 5 s (the next check is at most a second
 * away), and `carmyctl status` says carmyd is up. */
static void expect_calls_go_through(const char *rid)
{
	struct carmy_call call = E2E_CALL("p", "s", rid);
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char ctl[256], cmd[640], line[1024] = "";
	uint64_t t0 = harness_now_ns();
	FILE *out;
	int rc;

	rc = e2e_poll_begin(c, &call, &r, CARMY_RESERVED, -1, 5000, NULL);
	ck_assert_msg(rc == CARMY_RESERVED, "%s: still %s after 5 s", rid,
		      carmy_errname(rc));
	e2e_note("%s: reserved %.0f ms after the scribble's first refusal",
		 rid, e2e_ms_since(t0));
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "x", 1),
			 0);
	carmy_reservation_clear(&r);

	harness_path("tools/carmyctl", ctl, sizeof(ctl));
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' --json status", ctl,
		 d.socket);
	out = popen(cmd, "r");
	ck_assert_ptr_nonnull(out);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), out));
	ck_assert_int_eq(pclose(out), 0);
	ck_assert_msg(strstr(line, "\"carmyd_up\":true") != NULL, "status: %s",
		      line);
}

/* The first call after a scribble: refused, unless carmyd's check came in
 * between (then it has, or is about to have, logged so). */
static void expect_refused_or_fixed(const char *rid, const char *fixed)
{
	struct carmy_call call = E2E_CALL("p", "s", rid);
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	int rc = carmy_begin(c, &call, &r);

	if (rc == CARMY_RESERVED) {
		e2e_note("%s: carmyd's check came before the first call", rid);
		ck_assert(await_logged(fixed, 0, HARNESS_WAIT_MS));
		ck_assert_int_eq(carmy_release(c, &r), 0);
	} else {
		ck_assert_msg(rc == CARMY_EUNAVAILABLE, "%s: %s", rid,
			      carmy_errname(rc));
	}
	carmy_reservation_clear(&r);
}

/* A scribbled word is put back on the next check and logged once: later
 * checks find it whole and say nothing more. */
static void scribble_alive_once(uint32_t word, const char *rid)
{
	const uint32_t ours = __atomic_load_n(alive_word(), __ATOMIC_ACQUIRE);

	ck_assert(shm_daemon_alive(shm_header(&v)));
	ck_assert_int_eq(logged(ALIVE_FIXED), 0);
	__atomic_store_n(alive_word(), word, __ATOMIC_RELEASE);
	expect_refused_or_fixed(rid, ALIVE_FIXED);
	expect_calls_go_through(rid);
	ck_assert_msg(await_logged(ALIVE_FIXED, 0, HARNESS_WAIT_MS),
		      "carmyd did not log the repair");
	ck_assert_uint_eq(__atomic_load_n(alive_word(), __ATOMIC_ACQUIRE), ours);
	await_checks(2);
	ck_assert_int_eq(logged(ALIVE_FIXED), 1);
	ck_assert_int_eq(logged(ALIVE_AGAIN), 0);
	ck_assert(e2e_alive(&d));
}

START_TEST(test_a_zeroed_liveness_word_is_put_back_and_logged_once)
{
	scribble_alive_once(0, "after-zero");
}
END_TEST

START_TEST(test_an_owner_died_bit_on_the_liveness_word_is_put_back)
{
	uint32_t w = __atomic_load_n(alive_word(), __ATOMIC_ACQUIRE);

	scribble_alive_once(w | FUTEX_OWNER_DIED, "after-owner-died");
}
END_TEST

/*
 * A client that keeps zeroing the word, at once after each repair: carmyd
 * repairs it every second, but says so once when it starts and once when it
 * stops, not once a repair.
 */
START_TEST(test_a_client_that_keeps_zeroing_the_word_is_logged_once)
{
	uint64_t t0 = harness_now_ns();
	int repairs = 0, errors;

	__atomic_store_n(alive_word(), 0, __ATOMIC_RELEASE);
	while (repairs < 4 && e2e_ms_since(t0) < 30000) {
		if (__atomic_load_n(alive_word(), __ATOMIC_ACQUIRE) != 0) {
			repairs++;
			__atomic_store_n(alive_word(), 0, __ATOMIC_RELEASE);
		}
		poll(NULL, 0, 1);	/* between looks at the event */
	}
	e2e_note("carmyd put the word back %d times in %.0f ms", repairs,
		 e2e_ms_since(t0));
	ck_assert_int_eq(repairs, 4);
	expect_calls_go_through("after-the-scribbler");
	ck_assert_msg(await_logged(ALIVE_AGAIN, 0, HARNESS_WAIT_MS),
		      "no word that the scribbling stopped");
	errors = logged(ALIVE_FIXED);
	/* One episode, unless this process was kept off the CPU for a whole
	 * second between two repairs: then the word held for one check. */
	ck_assert_msg(errors >= 1 && errors < repairs,
		      "%d lines for %d repairs", errors, repairs);
}
END_TEST

/* A client holds every bucket BLOCKED: every probe starts over until it
 * gives up busy. carmyd's check turns them into tombstones and its reclaim
 * frees them; what the table held before is still found. The tick's walk
 * of the buckets goes a tenth a tick: a write in the middle of a pass is
 * met partly in it and partly in the next, and is still said once, with
 * every bucket it wrote, and no "again" after it. */
START_TEST(test_buckets_a_client_holds_blocked_are_freed_and_logged_once)
{
	struct carmy_call kept = E2E_CALL("p", "s", "kept");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1], said[64];
	uint32_t written = 0;

	ck_assert_int_eq(carmy_begin(c, &kept, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "k", 1),
			 0);
	ck_assert_int_eq(logged(BUCKETS_FIXED), 0);
	/* After a pass ends, about half a pass on (where the write lands
	 * decides only which path is taken; the checks hold either way). */
	await_checks(2);
	poll(NULL, 0, 450);
	for (uint32_t b = 0; b < v.geo.nbuckets; b++) {
		uint64_t w = __atomic_load_n(&v.buckets[b], __ATOMIC_ACQUIRE);

		if (SHM_W_STATE(w) == SHM_FREE) {
			__atomic_store_n(&v.buckets[b],
					 shm_next(w, SHM_BLOCKED),
					 __ATOMIC_RELEASE);
			written++;
		}
	}
	expect_refused_or_fixed("after-blocked", BUCKETS_FIXED);
	expect_calls_go_through("after-blocked");
	ck_assert_msg(await_logged(BUCKETS_FIXED, 0, HARNESS_WAIT_MS),
		      "carmyd did not log the repair");
	await_checks(3);
	ck_assert_int_eq(logged(BUCKETS_FIXED), 1);
	snprintf(said, sizeof(said), "error: %u buckets were BLOCKED", written);
	ck_assert_msg(logged(said) == 1, "no line says \"%s\"", said);
	ck_assert_int_eq(logged(BUCKETS_AGAIN), 0);
	for (uint32_t b = 0; b < v.geo.nbuckets; b++)
		ck_assert_uint_ne(SHM_W_STATE(v.buckets[b]), SHM_BLOCKED);
	ck_assert_int_eq(carmy_begin(c, &kept, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
	ck_assert(e2e_alive(&d));
}
END_TEST

/* A clean stop, like a kill -9, reads "no carmyd" at once: by the time
 * carmyd has exited, with no tick to wait for. */
START_TEST(test_a_clean_stop_reads_dead_at_once)
{
	ck_assert(shm_daemon_alive(shm_header(&v)));
	e2e_stop(&d);		/* SIGTERM; asserts a clean exit */
	ck_assert_msg(!shm_daemon_alive(shm_header(&v)),
		      "carmyd exited and the word says alive: %#x",
		      *alive_word());
}
END_TEST

/* And a kill -9: the kernel marks the word. */
START_TEST(test_a_killed_carmyd_reads_dead_at_once)
{
	ck_assert(shm_daemon_alive(shm_header(&v)));
	e2e_kill9(&d);
	ck_assert_msg(!shm_daemon_alive(shm_header(&v)),
		      "carmyd was killed and the word says alive: %#x",
		      *alive_word());
	ck_assert_uint_ne(*alive_word() & FUTEX_OWNER_DIED, 0);
}
END_TEST

/* The liveness word changed type with format 7: a segment of an older
 * format (another layout signature) is refused and left as it is, and the
 * log says what to do about it. */
START_TEST(test_a_segment_of_another_format_is_refused_and_left_untouched)
{
	uint8_t before[SHM_HEADER_SIZE];

	e2e_kill9(&d);
	shm_header(&v)->sh_layout ^= 1;	/* another build's */
	memcpy(before, v.base, sizeof(before));
	ck_assert_int_eq(harness_restart(&d, opts), -1);
	ck_assert_int_eq(logged("made by another build of Carmy "
				"(SEGMENT_LAYOUT_MISMATCH"), 1);
	ck_assert_int_eq(logged("rm /dev/shm"), 1);
	ck_assert(memcmp(before, v.base, sizeof(before)) == 0);
}
END_TEST

static Suite *liveness_suite(void)
{
	Suite *s = suite_create("liveness");
	TCase *tc = tcase_create("liveness");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_a_zeroed_liveness_word_is_put_back_and_logged_once);
	tcase_add_test(tc, test_an_owner_died_bit_on_the_liveness_word_is_put_back);
	tcase_add_test(tc, test_a_client_that_keeps_zeroing_the_word_is_logged_once);
	tcase_add_test(tc, test_buckets_a_client_holds_blocked_are_freed_and_logged_once);
	tcase_add_test(tc, test_a_clean_stop_reads_dead_at_once);
	tcase_add_test(tc, test_a_killed_carmyd_reads_dead_at_once);
	tcase_add_test(tc, test_a_segment_of_another_format_is_refused_and_left_untouched);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(liveness_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
