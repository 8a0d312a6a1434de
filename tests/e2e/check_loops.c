/*
 * check_loops.c - carmyd with several event loops: connections spread over
 * them complete, replay and die concurrently, and every answer is still
 * exactly the contract's. Again with polling off at both ends (carmyd
 * --spin-us 0, CARMY_SPIN_US=0), where every reply is a sleep and a
 * wake-up. Also: --threads and --spin-us are checked like every option,
 * and --spin-us's default follows the store.
 *
 * Workers are real processes, each with its own connection (so carmyd hands
 * them to different loops). Each one reserves, completes and replays its own
 * identities as fast as it can while the others do the same, then leaves a
 * last reservation open and exits: its loop drops the connection and sweeps
 * while the other loops are still completing. A worker reports a broken
 * answer through its exit status (the line that failed), never by asserting.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

#define WORKERS 8
#define CYCLES 300
#define LOOPS "4"
#define RUN_TIMEOUT_MS 60000

static struct carmyd_proc d;

static void setup(void)
{
	static const char *const opts[] = { "--threads", LOOPS, "--capacity",
					    "8192", "--max-result", "256",
					    NULL };

	e2e_start(&d, opts);
}

/* Neither carmyd's loops nor the clients poll: every wait sleeps. */
static void setup_nospin(void)
{
	static const char *const opts[] = { "--threads", "2", "--spin-us",
					    "0", "--capacity", "8192",
					    "--max-result", "256", NULL };

	setenv("CARMY_SPIN_US", "0", 1);	/* read at connect */
	e2e_start(&d, opts);
}

static void teardown(void)
{
	e2e_stop(&d);
}

static struct carmy_call call_of(char *rid, size_t size, int w, int i)
{
	snprintf(rid, size, "w%d-%d", w, i);
	return E2E_CALL("loops", "s", rid);
}

/* One worker's life. Returns 0, or the line of the first broken answer. */
static int worker(int w)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char rid[32], result[32], exec[CARMY_EXECUTION_ID_LEN + 1];
	struct carmy_call call;
	carmy_t *c;

	if (carmy_connect(&c, d.socket) != 0)
		return __LINE__;
	for (int i = 0; i < CYCLES; i++) {
		call = call_of(rid, sizeof(rid), w, i);
		if (carmy_begin(c, &call, &r) != CARMY_RESERVED)
			return __LINE__;
		strcpy(exec, r.execution_id);
		snprintf(result, sizeof(result), "result %d/%d", w, i);
		if (carmy_complete(c, &r, CARMY_STATUS_COMPLETED, result,
				   strlen(result)) != 0)
			return __LINE__;
		if (carmy_begin(c, &call, &r) != CARMY_REPLAY ||
		    strcmp(r.execution_id, exec) != 0 ||
		    r.status != CARMY_STATUS_COMPLETED ||
		    r.result_len != strlen(result) ||
		    memcmp(r.result, result, r.result_len) != 0)
			return __LINE__;
	}
	/* Leave one running: exiting drops the connection. */
	call = call_of(rid, sizeof(rid), w, CYCLES);
	if (carmy_begin(c, &call, &r) != CARMY_RESERVED)
		return __LINE__;
	return 0;
}

/*
 * With no client left, carmyd's loops must sleep: a loop that polled on
 * (--spin-us never ending) would burn a CPU. Its CPU time over half a
 * second (a measurement window: there is no event to wait for) must come
 * under a quarter of one CPU; a busy loop takes all of one in every
 * window. The last clients' sweeps may still run in the first window
 * (under ThreadSanitizer a sweep of the table takes tens of
 * milliseconds), so up to six windows are measured, and one must be quiet.
 */
static void assert_idle(void)
{
	const long hz = sysconf(_SC_CLK_TCK);
	unsigned long long used = 0;

	for (int w = 0; w < 6; w++) {
		unsigned long long t0 = e2e_cpu_ticks(d.pid);

		poll(NULL, 0, 500);
		used = e2e_cpu_ticks(d.pid) - t0;
		e2e_note("idle carmyd: %llu ms of CPU in 500 ms",
			 used * 1000 / (unsigned long long)hz);
		if (used * 4 * 2 < (unsigned long long)hz)
			return;
	}
	ck_assert_msg(false,
		      "idle carmyd was busy in each of six 0.5 s windows "
		      "(the last: %llu clock ticks, %ld a second)",
		      used, hz);
}

static void run_workers(void)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	pid_t pids[WORKERS];
	uint64_t t0 = harness_now_ns();
	char rid[32];
	carmy_t *c;

	for (int w = 0; w < WORKERS; w++) {
		pids[w] = fork();
		ck_assert_int_ge(pids[w], 0);
		if (pids[w] == 0)
			_exit(worker(w));
	}
	for (int w = 0; w < WORKERS; w++) {
		int left = RUN_TIMEOUT_MS - (int)e2e_ms_since(t0);
		int st = harness_waitpid(pids[w], left > 0 ? left : 1);

		if (st == -1) {
			kill(pids[w], SIGKILL);
			waitpid(pids[w], NULL, 0);
		}
		ck_assert_msg(st != -1, "worker %d did not finish in time", w);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "worker %d: broken answer at check_loops.c:%d", w,
			      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	e2e_note("%d workers x %d cycles over " LOOPS " loops: %.0f ms",
		 WORKERS, CYCLES, e2e_ms_since(t0));

	/* Everything completed replays to anyone; every reservation left
	 * open by an exited worker is uncertain (interrupted), never free. */
	c = e2e_connect(&d);
	for (int w = 0; w < WORKERS; w++) {
		struct carmy_call call = call_of(rid, sizeof(rid), w, CYCLES - 1);

		ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
		call = call_of(rid, sizeof(rid), w, CYCLES);
		ck_assert_int_eq(e2e_poll_begin(c, &call, &r, CARMY_EUNCERTAIN,
						CARMY_STATE_INTERRUPTED, 5000,
						NULL),
				 CARMY_EUNCERTAIN);
	}
	carmy_reservation_clear(&r);
	carmy_close(c);
	ck_assert(e2e_alive(&d));
	assert_idle();
}

START_TEST(test_loops_complete_replay_and_drop_concurrently)
{
	run_workers();
}
END_TEST

START_TEST(test_without_polling_every_answer_is_the_same)
{
	ck_assert_str_eq(getenv("CARMY_SPIN_US"), "0");
	run_workers();
}
END_TEST

/* Run carmyd with one bad value of opt; it must refuse to start. */
static void expect_refused(const char *opt, const char *value)
{
	char path[256];
	pid_t pid;
	int st;

	harness_path("daemon/carmyd", path, sizeof(path));
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		freopen("/dev/null", "w", stderr);
		execl(path, path, "--foreground", "--socket", "/nonexistent/s",
		      opt, value, (char *)NULL);
		_exit(127);
	}
	st = harness_waitpid(pid, HARNESS_WAIT_MS);
	if (st == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 64,
		      "carmyd %s %s: wanted exit status 64", opt, value);
}

START_TEST(test_bad_threads_values_are_refused)
{
	expect_refused("--threads", "0");
	expect_refused("--threads", "65");
	expect_refused("--threads", "-1");
	expect_refused("--threads", "two");
	expect_refused("--threads", "");
}
END_TEST

START_TEST(test_bad_spin_values_are_refused)
{
	expect_refused("--spin-us", "10001");
	expect_refused("--spin-us", "-1");
	expect_refused("--spin-us", "50us");
	expect_refused("--spin-us", "");
}
END_TEST

/* Start carmyd with extra options and its log in dir as log_name; check
 * that its ready line says it runs with --spin-us want. */
static void expect_spin(const char *dir, const char *log_name,
			const char *const *extra, const char *want)
{
	char log[128], line[32];
	const char *opts[16] = { "--capacity", "1024", "--max-result", "256",
				 "--log-level", "info", "--log-file", log };
	size_t n = 8;

	snprintf(log, sizeof(log), "%s/%s", dir, log_name);
	for (size_t i = 0; extra[i] != NULL; i++)
		opts[n++] = extra[i];
	opts[n] = NULL;
	e2e_start(&d, opts);
	ck_assert_msg(e2e_await_logged(log, "info: ready: ", 0,
				       HARNESS_WAIT_MS),
		      "no ready line in %s", log);
	snprintf(line, sizeof(line), ", spin-us %s, ", want);
	ck_assert_msg(e2e_logged(log, line) == 1,
		      "carmyd %s did not say \"%s\"", log_name, line);
	e2e_stop(&d);
}

/* A loop polls 50 µs after an event by default, and not at all with the
 * journal, whose every answer waits for a flush; --spin-us has the last
 * word with either store. */
START_TEST(test_the_default_spin_follows_the_store)
{
	char dir[] = "/tmp/carmy-spin.XXXXXX", spec[64];
	const char *memory[] = { NULL };
	const char *memory_0[] = { "--spin-us", "0", NULL };
	const char *journal[] = { "--store", spec, NULL };
	const char *journal_7[] = { "--store", spec, "--spin-us", "7", NULL };
	const char *journal_50[] = { "--spin-us", "50", "--store", spec, NULL };

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(spec, sizeof(spec), "journal:%s/j", dir);
	expect_spin(dir, "memory.log", memory, "50");
	expect_spin(dir, "memory-0.log", memory_0, "0");
	expect_spin(dir, "journal.log", journal, "0");
	expect_spin(dir, "journal-7.log", journal_7, "7");
	expect_spin(dir, "journal-50.log", journal_50, "50");
	e2e_rm_rf(dir);
}
END_TEST

static Suite *loops_suite(void)
{
	Suite *s = suite_create("loops");
	TCase *tc = tcase_create("loops");
	TCase *tn = tcase_create("no polling");
	TCase *to = tcase_create("options");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_loops_complete_replay_and_drop_concurrently);
	suite_add_tcase(s, tc);
	e2e_guard(tn);
	tcase_add_checked_fixture(tn, setup_nospin, teardown);
	tcase_add_test(tn, test_without_polling_every_answer_is_the_same);
	suite_add_tcase(s, tn);
	e2e_guard(to);
	tcase_add_test(to, test_the_default_spin_follows_the_store);
	tcase_add_test(to, test_bad_threads_values_are_refused);
	tcase_add_test(to, test_bad_spin_values_are_refused);
	suite_add_tcase(s, to);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(loops_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
