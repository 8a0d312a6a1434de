/*
 * check_store_plugin.c - a store loaded as a plugin (the example in
 * examples/store_text.c, built as a real shared object) carries Carmy's
 * promise across a reboot: carmyd killed with -9 and its segment removed
 * comes back with every result replaying and the running call uncertain.
 * A partial last line (a crash mid-write) is cut before anything is
 * appended, a damaged whole line stops carmyd rather than being skipped,
 * and what is not a plugin is refused at start, with nothing left behind.
 */
#include <fcntl.h>
#include <stdbool.h>
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

static void reboot(void);
static char *slurp(size_t *lenp);

static void setup(void)
{
	char so[256];

	strcpy(dir, "/tmp/check_store_plugin.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	harness_path("examples/.libs/carmy_store_text.so", so, sizeof(so));
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

/* An operator's settlements go through the plugin too: an interrupted call
 * resolved as committed replays its result after the next reboot, one
 * resolved as not committed runs again, and a purged identity is new. */
START_TEST(test_resolutions_and_purges_survive_a_reboot)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call yes = E2E_CALL("p", "s", "did-happen");
	struct carmy_call no = E2E_CALL("p", "s", "did-not");
	struct carmy_call old = E2E_CALL("p", "s", "old");
	struct e2e_child ch[2];
	char ctl[256], cmd[768], line[256];
	FILE *out;

	e2e_start(&d, opts);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &old, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "o", 1),
			 0);
	e2e_child_reserve(&ch[0], d.socket, &yes, E2E_HOLD);
	e2e_child_reserve(&ch[1], d.socket, &no, E2E_HOLD);
	carmy_close(c);
	c = NULL;
	/* A reboot turns both running calls interrupted. */
	e2e_kill9(&d);
	e2e_child_reap(&ch[0]);
	e2e_child_reap(&ch[1]);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	/* Purged first: a call resolved as committed is completed, and a
	 * purge would forget it too. */
	harness_path("tools/carmyctl", ctl, sizeof(ctl));
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' --json purge "
		 "--older-than 0s", ctl, d.socket);
	out = popen(cmd, "r");
	ck_assert_ptr_nonnull(out);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), out));
	ck_assert_int_eq(pclose(out), 0);
	ck_assert_msg(strstr(line, "\"purged\":1") != NULL, "purge: %s", line);
	{
		/* In the plugin's file (not asked again before the reboot:
		 * a new reservation would hide the old one anyway). */
		size_t len;
		char *text = slurp(&len);

		ck_assert_msg(strstr(text, "\nP ") != NULL,
			      "no purge line in the plugin's file");
		free(text);
	}
	ck_assert_int_eq(carmy_resolve(c, &yes, ch[0].exec, 1,
				       CARMY_STATUS_COMPLETED, "charged", 7), 0);
	ck_assert_int_eq(carmy_resolve(c, &no, ch[1].exec, 0, 0, NULL, 0), 0);

	/* The next reboot reads all three back from the plugin's file. */
	reboot();
	ck_assert_int_eq(carmy_begin(c, &yes, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, ch[0].exec);
	ck_assert_uint_eq(r.result_len, 7);
	ck_assert_mem_eq(r.result, "charged", 7);
	ck_assert_int_eq(carmy_begin(c, &no, &r), CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, ch[1].exec);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	ck_assert_int_eq(carmy_begin(c, &old, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	carmy_reservation_clear(&r);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}
END_TEST

/* The plugin's file, whole, NUL-terminated. */
static char *slurp(size_t *lenp)
{
	char path[128];
	char *buf = malloc(65536);
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/store.txt", dir);
	fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_ptr_nonnull(buf);
	n = read(fd, buf, 65535);
	ck_assert_int_gt(n, 0);
	close(fd);
	buf[n] = '\0';
	*lenp = (size_t)n;
	return buf;
}

static void spill(const char *buf, size_t len, bool append)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/store.txt", dir);
	fd = open(path, O_WRONLY | (append ? O_APPEND : O_TRUNC));
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* A reboot: carmyd killed, its segment gone, started again. */
static void reboot(void)
{
	carmy_close(c);
	c = NULL;
	e2e_kill9(&d);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
}

static void run_one(const char *id, const char *result)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", id);

	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, result,
					strlen(result)), 0);
}

static void replays(const char *id, const char *result)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", id);

	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
	ck_assert_uint_eq(r.result_len, strlen(result));
	ck_assert_mem_eq(r.result, result, r.result_len);
	carmy_reservation_clear(&r);
}

/* A crash in the middle of a line leaves part of it, never acknowledged.
 * Appended to as it was, the next record (acknowledged) would be glued to
 * it and lost or refused at the next start: the part is cut at load. */
START_TEST(test_a_partial_last_line_is_cut_before_the_next_record)
{
	static const char *const partial[] = {
		"C 9fb641a8a0c2cbb6",			/* a result, cut */
		"P 9fb641a8a0c2cbb64959f92ad0c75b29 ",	/* all but \n */
		"R",
	};
	char id[3][24];
	size_t len;
	char *buf;

	e2e_start(&d, opts);
	c = e2e_connect(&d);
	run_one("before", "ran once");
	for (int i = 0; i < 3; i++) {
		carmy_close(c);
		c = NULL;
		e2e_kill9(&d);
		ck_assert_int_eq(shm_unlink(d.segment), 0);
		spill(partial[i], strlen(partial[i]), true);
		e2e_restart(&d, opts);
		c = e2e_connect(&d);
		buf = slurp(&len);
		ck_assert_msg(buf[len - 1] == '\n', "partial line %d kept", i);
		free(buf);
		snprintf(id[i], sizeof(id[i]), "after-%d", i);
		run_one(id[i], id[i]);
		reboot();
		replays("before", "ran once");
		for (int k = 0; k <= i; k++)
			replays(id[k], id[k]);
	}
	carmy_close(c);	/* first: carmyd leaves open connections to the */
	c = NULL;	/* kernel, which LeakSanitizer would report */
	e2e_stop(&d);
}
END_TEST

/* A whole line that is not a record, exactly, may be one that was: carmyd
 * refuses the file instead of skipping it, and starts once it is mended. */
START_TEST(test_a_damaged_line_stops_carmyd)
{
	struct damage {
		const char *what;
		int line;		/* 0: the R line, 1: the C line */
		const char *from, *to;	/* first occurrence, in that line:
					 * C exec finished 1 0 result */
	};
	static const struct damage dmg[] = {
		{ "unknown op", 0, "R ", "T " },
		{ "bad hex digit", 1, " 72616e", " 7g616e" },
		{ "signed hex digit", 1, " 72616e", " -2616e" },
		{ "extra word", 0, "\n", " 7\n" },
		{ "missing word", 1, " 1 0 ", " 1 " },
		{ "number with junk", 1, " 1 0 ", " 1x 0 " },
		{ "number with a sign", 1, " 1 0 ", " +1 0 " },
		{ "double space", 0, "R ", "R  " },
	};
	size_t len;
	char *good;

	e2e_start(&d, opts);
	c = e2e_connect(&d);
	run_one("only", "ran once");	/* "72616e206f6e6365" */
	carmy_close(c);
	c = NULL;
	e2e_kill9(&d);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	good = slurp(&len);
	for (size_t i = 0; i < sizeof(dmg) / sizeof(dmg[0]); i++) {
		char bad[65536 + 64];
		const char *line = good, *at;
		size_t pre;

		if (dmg[i].line == 1)
			line = strchr(good, '\n') + 1;
		at = strstr(line, dmg[i].from);
		ck_assert_msg(at != NULL, "%s: no \"%s\"", dmg[i].what,
			      dmg[i].from);
		pre = (size_t)(at - good);
		memcpy(bad, good, pre);
		strcpy(bad + pre, dmg[i].to);
		strcat(bad, at + strlen(dmg[i].from));
		spill(bad, strlen(bad), false);
		ck_assert_msg(harness_restart(&d, opts) == -1,
			      "carmyd started on a file with %s", dmg[i].what);
		shm_unlink(d.segment);	/* if it got that far */
	}
	spill(good, len, false);
	free(good);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	replays("only", "ran once");
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
	/* harness_stop after each refusal removes the test's directory. */
	ck_assert_int_eq(harness_start(&x, missing), -1);
	harness_stop(&x);
	ck_assert_int_eq(harness_start(&x, other), -1);
	harness_stop(&x);
	ck_assert_int_eq(harness_start(&x, empty), -1);
	harness_stop(&x);
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
	tcase_add_test(tc, test_resolutions_and_purges_survive_a_reboot);
	tcase_add_test(tc, test_a_partial_last_line_is_cut_before_the_next_record);
	tcase_add_test(tc, test_a_damaged_line_stops_carmyd);
	tcase_add_test(tc, test_what_is_not_a_plugin_is_refused);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
