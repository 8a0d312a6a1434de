/*
 * check_store_plugin.c - a store loaded as a plugin (the example in
 * daemon/store_text.c, built as a real shared object) carries Carmy's
 * promise across a reboot: carmyd killed with -9 and its segment removed
 * comes back with every result replaying and the running call uncertain.
 * What is not a plugin is refused at start, with nothing left behind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

#define NDONE 5
#define MANY 100	/* more than the plugin's first table of 64 */

static char dir[64], spec[512];
static const char *opts[] = { "--capacity", "256", "--max-result", "256",
			      "--store", spec, NULL };
static struct carmyd_proc d;
static carmy_t *c;

static void setup(void)
{
	char so[256];

	strcpy(dir, "/tmp/check_store_plugin.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	harness_path("daemon/.libs/carmy_store_text.so", so, sizeof(so));
	ck_assert_msg(access(so, R_OK) == 0, "no plugin at %s", so);
	snprintf(spec, sizeof(spec), "plugin:%s:%s/store.txt", so, dir);
}

static void teardown(void)
{
	char cmd[128];

	carmy_close(c);
	c = NULL;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", dir);
}

START_TEST(test_plugin_store_survives_a_reboot)
{
	static const int statuses[] = { CARMY_STATUS_COMPLETED,
		CARMY_STATUS_FAILED, CARMY_STATUS_TIMED_OUT,
		CARMY_STATUS_CANCELLED };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call running = E2E_CALL("p", "s", "running");
	struct carmy_call released = E2E_CALL("p", "s", "released");
	char exec[NDONE][CARMY_EXECUTION_ID_LEN + 1], rid[NDONE][24];
	struct e2e_child ch;

	e2e_start(&d, opts);
	c = e2e_connect(&d);
	for (int i = 0; i < NDONE; i++) {
		struct carmy_call call;

		snprintf(rid[i], sizeof(rid[i]), "done-%d", i);
		call = E2E_CALL("p", "s", rid[i]);
		ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
		strcpy(exec[i], r.execution_id);
		/* An empty result for the first: "-" in the file. */
		ck_assert_int_eq(carmy_complete(c, &r, statuses[i % 4], rid[i],
						i == 0 ? 0 : strlen(rid[i])), 0);
	}
	ck_assert_int_eq(carmy_begin(c, &released, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	/* Enough executions that the plugin's load has to grow its table. */
	for (int i = 0; i < MANY; i++) {
		char id[24];
		struct carmy_call call;

		snprintf(id, sizeof(id), "many-%d", i);
		call = E2E_CALL("p", "s", id);
		ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
		ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED,
						id, strlen(id)), 0);
	}
	e2e_child_reserve(&ch, d.socket, &running, E2E_HOLD);
	carmy_close(c);
	c = NULL;

	/* A reboot: carmyd and the owner die, the segment is gone. */
	e2e_kill9(&d);
	e2e_child_reap(&ch);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	e2e_restart(&d, opts);

	c = e2e_connect(&d);
	for (int i = 0; i < NDONE; i++) {
		struct carmy_call call = E2E_CALL("p", "s", rid[i]);

		ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
		ck_assert_str_eq(r.execution_id, exec[i]);
		ck_assert_int_eq(r.status, statuses[i % 4]);
		ck_assert_uint_eq(r.result_len, i == 0 ? 0 : strlen(rid[i]));
		if (i > 0)
			ck_assert_mem_eq(r.result, rid[i], r.result_len);
	}
	for (int i = 0; i < MANY; i++) {
		char id[24];
		struct carmy_call call;

		snprintf(id, sizeof(id), "many-%d", i);
		call = E2E_CALL("p", "s", id);
		ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
		ck_assert_uint_eq(r.result_len, strlen(id));
		ck_assert_mem_eq(r.result, id, r.result_len);
	}
	ck_assert_int_eq(carmy_begin(c, &running, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_INTERRUPTED);
	ck_assert_str_eq(r.execution_id, ch.exec);
	ck_assert_int_eq(carmy_begin(c, &released, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "x", 1),
			 0);
	carmy_reservation_clear(&r);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}
END_TEST

/* Not a plugin: a path that is not there, and a shared object that does
 * not export carmy_store_plugin. carmyd exits without serving. */
START_TEST(test_what_is_not_a_plugin_is_refused)
{
	char lib[256], bad[600];
	const char *const missing[] = { "--store",
		"plugin:/nonexistent/carmy_store.so", NULL };
	const char *const other[] = { "--store", bad, NULL };
	const char *const empty[] = { "--store", "plugin:", NULL };
	struct carmyd_proc x;

	harness_path("libclient/.libs/libcarmy.so", lib, sizeof(lib));
	ck_assert_msg(access(lib, R_OK) == 0, "no %s", lib);
	snprintf(bad, sizeof(bad), "plugin:%s", lib);
	ck_assert_int_eq(harness_start(&x, missing), -1);
	ck_assert_int_eq(harness_start(&x, other), -1);
	ck_assert_int_eq(harness_start(&x, empty), -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("store_plugin");
	TCase *tc = tcase_create("store_plugin");
	SRunner *sr;
	int failed;

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_plugin_store_survives_a_reboot);
	tcase_add_test(tc, test_what_is_not_a_plugin_is_refused);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
