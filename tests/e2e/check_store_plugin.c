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
#include <sys/stat.h>
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

/* A line of the plugin's file for a call interrupted long ago, whose
 * exec id is 16 bytes of x, with tool (text) and args (hex: kept of
 * whole bytes). */
static void crafted(uint8_t x, const char *rid, const char *tool,
		    const char *args_hex, unsigned whole, unsigned format)
{
	char line[2048], hex[3][128];
	const char *part[3] = { "p", "s", rid };
	const char *t;
	int n;

	for (int k = 0; k < 3; k++) {
		hex[k][0] = '\0';
		for (const char *q = part[k]; *q != '\0'; q++)
			sprintf(hex[k] + strlen(hex[k]), "%02x",
				(unsigned char)*q);
	}
	n = snprintf(line, sizeof(line), "R ");
	for (int i = 0; i < 16; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", x);
	n += snprintf(line + n, sizeof(line) - (size_t)n,
		      " 00000000000000000000000000000000"
		      " 00000000000000000000000000000000 42 1000 %s %s %s %zu "
		      "%u %u ", hex[0], hex[1], hex[2], strlen(tool), whole,
		      format);
	for (t = tool; *t != '\0'; t++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x",
			      (unsigned char)*t);
	n += snprintf(line + n, sizeof(line) - (size_t)n, " %s\n", args_hex);
	spill(line, (size_t)n, true);
}

/* carmyctl --socket ARGS: its standard output, whole, into out. */
static void carmyctl_out(const char *args, char *out, size_t size)
{
	char ctl[256], cmd[768];
	FILE *f;
	size_t n;

	harness_path("tools/carmyctl", ctl, sizeof(ctl));
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' %s", ctl, d.socket,
		 args);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(out, 1, size - 1, f);
	out[n] = '\0';
	ck_assert_msg(pclose(f) == 0, "carmyctl %s failed", args);
}

/*
 * A call's summary goes through the plugin (struct carmy_store_record's
 * tool, args and result format) and comes back after a reboot: the
 * format still holds a resolve to it. What a store gives back is shown
 * as it is: arguments that are not msgpack escaped, cut ones rendered as
 * far as they go and marked.
 */
START_TEST(test_a_call_comes_back_from_the_plugin)
{
	static const uint8_t args[] = { 0x92, 0xa2, '-', 'c', 0xa4, 'e', 'c',
					'h', 'o' };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "run");
	char out[8192], cmd[128], cut[600], want[1024];
	carmy_t *h;
	size_t n;

	call.tool = "bash";
	call.tool_len = 4;
	call.args = args;
	call.args_len = sizeof(args);
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	h = e2e_connect(&d);
	ck_assert_int_eq(carmy_set_result_format(h, CARMY_FORMAT_EXIT_OUTPUT),
			 0);
	ck_assert_int_eq(carmy_begin(h, &call, &r), CARMY_RESERVED);
	carmy_close(h);
	ck_assert_int_eq(e2e_poll_begin(c, &call, &r, CARMY_EUNCERTAIN,
					CARMY_STATE_INTERRUPTED,
					HARNESS_WAIT_MS, NULL),
			 CARMY_EUNCERTAIN);
	carmy_close(c);
	c = NULL;
	e2e_kill9(&d);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	/* Not msgpack (0xc1 is no type), and msgpack cut where carmyd cuts:
	 * ["a" x 200, "b" x 100], 305 bytes, of which 256 are kept. */
	crafted(0xaa, "not-msgpack", "t1", "ffc10041", 4, 0);
	n = (size_t)sprintf(cut, "92d9c8");
	for (int i = 0; i < 200; i++)
		n += (size_t)sprintf(cut + n, "61");
	n += (size_t)sprintf(cut + n, "d964");
	for (int i = 0; i < 51; i++)
		n += (size_t)sprintf(cut + n, "62");
	crafted(0xbb, "cut", "t2", cut, 305, 1);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);

	ck_assert_int_eq(carmy_resolve(c, &call, r.execution_id, 1,
				       CARMY_STATUS_COMPLETED, "done", 4),
			 CARMY_EINVALID_RESULT);
	snprintf(cmd, sizeof(cmd), "--json show %s", r.execution_id);
	carmyctl_out(cmd, out, sizeof(out));
	ck_assert_msg(strstr(out, "\"tool\":\"bash\",\"tool_len\":4,"
			      "\"tool_truncated\":false,\"args\":[\"-c\","
			      "\"echo\"],\"args_len\":9,\"args_truncated\":"
			      "false,\"result_format\":\"exit_output\"") !=
		      NULL, "show: %s", out);
	carmyctl_out("--json list --state uncertain", out, sizeof(out));
	ck_assert_msg(strstr(out, "\"tool\":\"t1\",\"tool_len\":2,"
			      "\"tool_truncated\":false,\"args_prefix\":"
			      "\"\\\\xff\\\\xc1\\\\x00A\",\"args_len\":4,"
			      "\"args_truncated\":false,\"result_format\":"
			      "\"bytes\"") != NULL, "list: %s", out);
	n = (size_t)sprintf(want, "\"tool\":\"t2\",\"tool_len\":2,"
			    "\"tool_truncated\":false,\"args_prefix\":"
			    "\"[\\\"");
	memset(want + n, 'a', 200);
	n += 200;
	n += (size_t)sprintf(want + n, "\\\",\\\"");
	memset(want + n, 'b', 51);
	n += 51;
	sprintf(want + n, "\u2026\",\"args_len\":305,\"args_truncated\":"
		"true,\"result_format\":\"exit_output\"");
	ck_assert_msg(strstr(out, want) != NULL, "list: %s\nwant: %s", out,
		      want);
	carmyctl_out("show exec_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", out,
		     sizeof(out));
	ck_assert_msg(strstr(out, "\nargs          [\"aaaa") != NULL &&
		      strstr(out, "bbbb\u2026 (305 bytes, the first 256 "
			     "kept)\n") != NULL, "show: %s", out);
	carmyctl_out("show exec_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", out,
		     sizeof(out));
	ck_assert_msg(strstr(out, "\nargs          \\xff\\xc1\\x00A\n") !=
		      NULL, "show: %s", out);
	carmy_reservation_clear(&r);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}
END_TEST

/* A plugin built for ABI 2, whose records lack the call: refused at
 * start, with what to do. */
START_TEST(test_a_plugin_of_abi_2_is_refused)
{
	char so[256], spec2[512], log[128];
	const char *const args[] = { "--store", spec2, "--log-file", log,
				     NULL };
	struct carmyd_proc x;

	harness_path("tests/e2e/.libs/store_abi2.so", so, sizeof(so));
	ck_assert_msg(access(so, R_OK) == 0, "no plugin at %s", so);
	snprintf(spec2, sizeof(spec2), "plugin:%s", so);
	snprintf(log, sizeof(log), "%s/carmyd.log", dir);
	ck_assert_int_eq(harness_start(&x, args), -1);
	harness_stop(&x);
	ck_assert_int_eq(e2e_logged(log, "a Carmy store plugin of ABI 2; "
				    "this carmyd needs ABI 3"), 1);
	ck_assert_int_eq(e2e_logged(log, "rebuild it against"), 1);
}
END_TEST

/* The PostgreSQL store's plugin where it is not installed: refused, with
 * the package to install (Debian ships it apart, in carmy-store-pg). */
START_TEST(test_a_missing_pg_plugin_names_its_package)
{
	char log[128];
	const char *const args[] = { "--store",
		"plugin:/nonexistent/carmy_store_pg.so:dbname=x",
		"--log-file", log, NULL };
	struct carmyd_proc x;

	snprintf(log, sizeof(log), "%s/carmyd.log", dir);
	ck_assert_int_eq(harness_start(&x, args), -1);
	harness_stop(&x);
	ck_assert_int_eq(e2e_logged(log, "cannot load store plugin "
				    "/nonexistent/carmy_store_pg.so"), 1);
	ck_assert_int_eq(e2e_logged(log, "install the carmy-store-pg "
				    "package"), 1);
}
END_TEST

/* A password in the store's spec (a PostgreSQL connection string's) is
 * not written to the log: the ready line shows it as ***. The text store
 * takes the whole ARGS as its file's name, so it opens with one. */
START_TEST(test_a_password_in_the_store_spec_is_not_logged)
{
	char log[128], so[256], pw[600], text[64];
	const char *const args[] = { "--store", pw, "--log-file", log,
				     "--log-level", "info", NULL };
	struct carmyd_proc x;

	harness_path("examples/.libs/carmy_store_text.so", so, sizeof(so));
	/* The file's name is the ARGS: its directories made first. */
	snprintf(pw, sizeof(pw), "%s/store password = hunter2 postgresql:",
		 dir);
	ck_assert_int_eq(mkdir(pw, 0700), 0);
	snprintf(pw, sizeof(pw), "plugin:%s:%s/store password = hunter2 "
		 "postgresql://u:s3cret@db", so, dir);
	snprintf(log, sizeof(log), "%s/carmyd.log", dir);
	e2e_start(&x, args);
	e2e_stop(&x);
	ck_assert_int_eq(e2e_logged(log, "ready: "), 1);
	snprintf(text, sizeof(text), "/store password=*** "
		 "postgresql://u:***@db, max-clients");
	ck_assert_int_eq(e2e_logged(log, text), 1);
	ck_assert_int_eq(e2e_logged(log, "hunter2"), 0);
	ck_assert_int_eq(e2e_logged(log, "s3cret"), 0);
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

/* Copy file from to to, with mode. */
static void copy_file(const char *from, const char *to, mode_t mode)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ssize_t n;

	ck_assert_int_ge(in, 0);
	ck_assert_int_ge(out, 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(fchmod(out, mode), 0);
	close(in);
	close(out);
}

/* A plugin is code carmyd runs: not from a path another user could have
 * changed (a directory others may write, a file others may write), nor
 * from a bare name looked for along the library search path. The same
 * file, where only carmyd's user can change it, loads. */
START_TEST(test_a_plugin_others_could_change_is_refused)
{
	char so[256], sub[128], path[256], spec2[512];
	const char *const args[] = { "--store", spec2, NULL };
	struct carmyd_proc x;

	harness_path("examples/.libs/carmy_store_text.so", so, sizeof(so));
	/* A directory others may write (not sticky). */
	snprintf(sub, sizeof(sub), "%s/open", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	ck_assert_int_eq(chmod(sub, 0777), 0);
	snprintf(path, sizeof(path), "%s/carmy_store_text.so", sub);
	copy_file(so, path, 0644);
	snprintf(spec2, sizeof(spec2), "plugin:%s:%s/store1.txt", path, dir);
	ck_assert_int_eq(harness_start(&x, args), -1);
	harness_stop(&x);
	/* A file others may write, in a directory of ours. */
	snprintf(sub, sizeof(sub), "%s/ours", dir);
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	snprintf(path, sizeof(path), "%s/carmy_store_text.so", sub);
	copy_file(so, path, 0666);
	snprintf(spec2, sizeof(spec2), "plugin:%s:%s/store2.txt", path, dir);
	ck_assert_int_eq(harness_start(&x, args), -1);
	harness_stop(&x);
	/* A relative path, to the same file. */
	ck_assert_int_eq(chmod(path, 0644), 0);
	snprintf(spec2, sizeof(spec2), "plugin:%s:%s/s.txt", path + 1, dir);
	ck_assert_int_eq(harness_start(&x, args), -1);
	harness_stop(&x);
	/* The same file, writable by its owner only: it loads. */
	ck_assert_int_eq(chmod(path, 0644), 0);
	snprintf(spec2, sizeof(spec2), "plugin:%s:%s/store3.txt", path, dir);
	ck_assert_int_eq(harness_start(&x, args), 0);
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
	tcase_add_test(tc, test_a_plugin_others_could_change_is_refused);
	tcase_add_test(tc, test_resolutions_and_purges_survive_a_reboot);
	tcase_add_test(tc, test_a_partial_last_line_is_cut_before_the_next_record);
	tcase_add_test(tc, test_a_damaged_line_stops_carmyd);
	tcase_add_test(tc, test_what_is_not_a_plugin_is_refused);
	tcase_add_test(tc, test_a_missing_pg_plugin_names_its_package);
	tcase_add_test(tc, test_a_password_in_the_store_spec_is_not_logged);
	tcase_add_test(tc, test_a_call_comes_back_from_the_plugin);
	tcase_add_test(tc, test_a_plugin_of_abi_2_is_refused);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
