/*
 * check_calls.c - what an entry keeps of its call, and what carmyd holds a
 * resolve to, against a real carmyd.
 *
 * Every entry keeps its call's tool name and arguments (the first 120 and
 * 256 bytes, with their whole lengths) and the format its client records
 * results in (carmy_set_result_format). A committed resolve whose result
 * that client could not read is refused with INVALID_RESULT, and the
 * execution stays interrupted; one it can read replays. carmyctl checks
 * the format before it asks. With a journal, the call and its format come
 * back after a reboot (carmyd killed, its segment gone), and still hold.
 * carmy_try_begin() answers what the segment answers and never waits for
 * carmyd, not even a stopped one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

static struct carmyd_proc d;
static carmy_t *c;
static char dir[64];

static void setup(void)
{
	strcpy(dir, "/tmp/check_calls.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
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

/* ------------------------------------------------------------ helpers */

/* A private copy of the call of the entry of execution id in segment. */
static void call_of(const char *segment, const char *id, struct shm_call *out)
{
	uint8_t exec[SHM_EXEC_LEN];
	struct shm_view v;
	bool found = false;

	e2e_exec_bytes(id, exec);
	ck_assert_int_eq(shm_map(segment, false, &v), 0);
	for (uint32_t e = 0; e < v.geo.capacity && !found; e++) {
		if (memcmp(shm_entry_at(&v, e)->en_exec, exec,
			   SHM_EXEC_LEN) != 0)
			continue;
		shm_call_copy(&v, e, out);
		found = true;
	}
	shm_unmap(&v);
	ck_assert_msg(found, "no entry of %s", id);
}

/*
 * Reserve call on a handle of its own with result format fmt, then close
 * that handle without completing: carmyd takes its owner for dead, and the
 * entry turns interrupted. Waits until c sees it so, and returns its
 * execution id in id.
 */
static void interrupted(const struct carmy_call *call, int fmt, char *id)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	carmy_t *h = e2e_connect(&d);

	ck_assert_int_eq(carmy_set_result_format(h, fmt), 0);
	ck_assert_int_eq(carmy_begin(h, call, &r), CARMY_RESERVED);
	strcpy(id, r.execution_id);
	carmy_close(h);
	ck_assert_int_eq(e2e_poll_begin(c, call, &r, CARMY_EUNCERTAIN,
					CARMY_STATE_INTERRUPTED,
					HARNESS_WAIT_MS, NULL),
			 CARMY_EUNCERTAIN);
	ck_assert_str_eq(r.execution_id, id);
	carmy_reservation_clear(&r);
}

/* begin (carmy_begin or carmy_try_begin) of call answers uncertain, in
 * state, as execution id. */
static void uncertain(int (*begin)(carmy_t *, const struct carmy_call *,
				   struct carmy_reservation *),
		      const struct carmy_call *call, int state, const char *id)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	ck_assert_int_eq(begin(c, call, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, state);
	ck_assert_str_eq(r.execution_id, id);
	carmy_reservation_clear(&r);
}

/* It still answers interrupted, as execution id. */
static void still_interrupted(const struct carmy_call *call, const char *id)
{
	uncertain(carmy_begin, call, CARMY_STATE_INTERRUPTED, id);
}

/* It replays exactly len bytes of want, as execution id. */
static void replays(const struct carmy_call *call, const char *id,
		    const void *want, size_t len)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	ck_assert_int_eq(carmy_begin(c, call, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, id);
	ck_assert_uint_eq(r.result_len, len);
	ck_assert_mem_eq(r.result, want, len);
	carmy_reservation_clear(&r);
}

/* carmyctl --socket with args; its exit status, and its standard error
 * in err. */
static int carmyctl(const char *args, char *err, size_t size)
{
	char ctl[256], cmd[1024], path[128];
	FILE *f;
	size_t n;
	int st;

	harness_path("tools/carmyctl", ctl, sizeof(ctl));
	snprintf(path, sizeof(path), "%s/ctl.err", dir);
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' %s >/dev/null 2>'%s'",
		 ctl, d.socket, args, path);
	st = system(cmd);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(err, 1, size - 1, f);
	err[n] = '\0';
	fclose(f);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* msgpack: one str of n bytes of c (str16: n < 65536). */
static size_t str16(uint8_t *out, size_t n, char ch)
{
	out[0] = 0xda;
	out[1] = (uint8_t)(n >> 8);
	out[2] = (uint8_t)n;
	memset(out + 3, ch, n);
	return n + 3;
}

/* ------------------------------------------------------------ tests */

START_TEST(test_set_result_format_takes_only_the_two)
{
	e2e_start(&d, NULL);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_set_result_format(NULL, CARMY_FORMAT_BYTES),
			 -EINVAL);
	ck_assert_int_eq(carmy_set_result_format(c, 2), -EINVAL);
	ck_assert_int_eq(carmy_set_result_format(c, -1), -EINVAL);
	ck_assert_int_eq(carmy_set_result_format(c, CARMY_FORMAT_EXIT_OUTPUT),
			 0);
	ck_assert_int_eq(carmy_set_result_format(c, CARMY_FORMAT_BYTES), 0);
	ck_assert_str_eq(carmy_errname(CARMY_EINVALID_RESULT),
			 "INVALID_RESULT");
	ck_assert_ptr_nonnull(strstr(carmy_strerror(CARMY_EINVALID_RESULT),
				     "carmyctl show"));
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}
END_TEST

/* The client writes the call with the entry: a small one whole, a large
 * one cut to what the segment keeps, with the whole lengths and the
 * handle's format at the time. */
START_TEST(test_an_entry_keeps_its_call)
{
	static const uint8_t small[] = { 0x81, 0xa2, 'i', 'd', 0x05 };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "small");
	char tool[200], id[CARMY_EXECUTION_ID_LEN + 1];
	uint8_t big[400];
	struct shm_call cl;
	size_t n;

	e2e_start(&d, NULL);
	c = e2e_connect(&d);
	call.tool = "create_order";
	call.tool_len = 12;
	call.args = small;
	call.args_len = sizeof(small);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	call_of(d.segment, r.execution_id, &cl);
	ck_assert_uint_eq(cl.cl_tool_len, 12);
	ck_assert_uint_eq(cl.cl_args_len, sizeof(small));
	ck_assert_uint_eq(cl.cl_format, CARMY_FORMAT_BYTES);
	ck_assert_mem_eq(cl.cl_data, "create_order", 12);
	ck_assert_mem_eq(cl.cl_data + 12, small, sizeof(small));
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok", 2),
			 0);

	memset(tool, 't', sizeof(tool));
	n = str16(big, 300, 'a');
	call = E2E_CALL("p", "s", "big");
	call.tool = tool;
	call.tool_len = sizeof(tool);
	call.args = big;
	call.args_len = n;
	ck_assert_int_eq(carmy_set_result_format(c, CARMY_FORMAT_EXIT_OUTPUT),
			 0);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	strcpy(id, r.execution_id);
	call_of(d.segment, id, &cl);
	ck_assert_uint_eq(cl.cl_tool_len, sizeof(tool));
	ck_assert_uint_eq(shm_call_tool_kept(&cl), SHM_TOOL_KEEP);
	ck_assert_uint_eq(cl.cl_args_len, n);
	ck_assert_uint_eq(shm_call_args_kept(&cl), SHM_ARGS_KEEP);
	ck_assert_uint_eq(cl.cl_format, CARMY_FORMAT_EXIT_OUTPUT);
	ck_assert_mem_eq(cl.cl_data, tool, SHM_TOOL_KEEP);
	ck_assert_mem_eq(cl.cl_data + SHM_TOOL_KEEP, big, SHM_ARGS_KEEP);
	/* The format is the handle's when it reserved, not now. */
	ck_assert_int_eq(carmy_set_result_format(c, CARMY_FORMAT_BYTES), 0);
	call_of(d.segment, id, &cl);
	ck_assert_uint_eq(cl.cl_format, CARMY_FORMAT_EXIT_OUTPUT);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	carmy_reservation_clear(&r);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}
END_TEST

/* carmy-run's format: what its replay could not read is refused, and the
 * execution stays interrupted; what it can read replays. */
START_TEST(test_resolve_refuses_a_result_the_client_cannot_read)
{
	static const uint8_t three[] = { 0, 0, 0 };
	static const uint8_t big[] = { 0, 0, 1, 0, 'x' };
	static const uint8_t minus[] = { 0xff, 0xff, 0xff, 0xff };
	static const struct {
		const char *what;
		const uint8_t *res;
		size_t len;
	} bad[] = {
		{ "JSON", (const uint8_t *)"{\"order_id\":5}", 14 },
		{ "nothing", (const uint8_t *)"", 0 },
		{ "3 bytes", three, sizeof(three) },
		{ "exit code 256", big, sizeof(big) },
		{ "exit code -1", minus, sizeof(minus) },
	};
	static const uint8_t good[] = { 0, 0, 0, 3, 'h', 'e', 'l', 'l', 'o' };
	struct carmy_call call = E2E_CALL("p", "s", "run");
	struct carmy_call gone = E2E_CALL("p", "s", "never-ran");
	char id[CARMY_EXECUTION_ID_LEN + 1], id2[CARMY_EXECUTION_ID_LEN + 1];
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	e2e_start(&d, NULL);
	c = e2e_connect(&d);
	interrupted(&call, CARMY_FORMAT_EXIT_OUTPUT, id);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = carmy_resolve(c, &call, id, 1, CARMY_STATUS_COMPLETED,
				       bad[i].len ? bad[i].res : NULL,
				       bad[i].len);

		ck_assert_msg(rc == CARMY_EINVALID_RESULT, "%s: %s",
			      bad[i].what, carmy_errname(rc));
		still_interrupted(&call, id);
	}
	ck_assert_int_eq(carmy_resolve(c, &call, id, 1, CARMY_STATUS_FAILED,
				       good, sizeof(good)), 0);
	replays(&call, id, good, sizeof(good));
	/* Not committed needs no result, whatever the format. */
	interrupted(&gone, CARMY_FORMAT_EXIT_OUTPUT, id2);
	ck_assert_int_eq(carmy_resolve(c, &gone, id2, 0, 0, NULL, 0), 0);
	ck_assert_int_eq(carmy_begin(c, &gone, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	carmy_reservation_clear(&r);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}
END_TEST

/* Opaque bytes, the default: any result. carmyctl refuses an exit code
 * for such a call before it asks carmyd, and the call stays interrupted. */
START_TEST(test_opaque_results_take_any_bytes)
{
	struct carmy_call call = E2E_CALL("p", "s", "opaque");
	struct carmy_call other = E2E_CALL("p", "s", "by-carmyctl");
	char id[CARMY_EXECUTION_ID_LEN + 1], args[256], err[1024];

	e2e_start(&d, NULL);
	c = e2e_connect(&d);
	interrupted(&call, CARMY_FORMAT_BYTES, id);
	ck_assert_int_eq(carmy_resolve(c, &call, id, 1, CARMY_STATUS_COMPLETED,
				       "{\"order_id\":5}", 14), 0);
	replays(&call, id, "{\"order_id\":5}", 14);

	interrupted(&other, CARMY_FORMAT_BYTES, id);
	snprintf(args, sizeof(args), "resolve %s --committed --exit-code 0",
		 id);
	ck_assert_int_eq(carmyctl(args, err, sizeof(err)), 1);
	ck_assert_msg(strstr(err, "INVALID_RESULT") != NULL &&
		      strstr(err, "--result") != NULL, "carmyctl: %s", err);
	still_interrupted(&other, id);
	snprintf(args, sizeof(args), "resolve %s --committed --result 'no "
		 "order'", id);
	ck_assert_int_eq(carmyctl(args, err, sizeof(err)), 0);
	replays(&other, id, "no order", 8);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}
END_TEST

/*
 * A reboot with the journal: carmyd killed, the segment gone. The entry
 * comes back from the journal with its call and its format, which still
 * holds a resolve to it; the resolution, in the journal too, replays after
 * the next reboot.
 */
START_TEST(test_the_call_and_its_format_survive_a_reboot)
{
	static const uint8_t args[] = { 0x92, 0xa2, '-', 'c', 0xa4, 'e', 'c',
					'h', 'o' };
	static const uint8_t good[] = { 0, 0, 0, 0, 'o', 'k', '\n' };
	struct carmy_call call = E2E_CALL("p", "s", "reboot");
	char spec[128], id[CARMY_EXECUTION_ID_LEN + 1];
	const char *opts[] = { "--store", spec, "--grace", "0", NULL };
	struct shm_call cl;

	snprintf(spec, sizeof(spec), "journal:%s/j", dir);
	call.tool = "bash";
	call.tool_len = 4;
	call.args = args;
	call.args_len = sizeof(args);
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	interrupted(&call, CARMY_FORMAT_EXIT_OUTPUT, id);
	carmy_close(c);
	c = NULL;
	e2e_kill9(&d);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);

	call_of(d.segment, id, &cl);
	ck_assert_uint_eq(cl.cl_tool_len, 4);
	ck_assert_uint_eq(cl.cl_args_len, sizeof(args));
	ck_assert_uint_eq(cl.cl_format, CARMY_FORMAT_EXIT_OUTPUT);
	ck_assert_mem_eq(cl.cl_data, "bash", 4);
	ck_assert_mem_eq(cl.cl_data + 4, args, sizeof(args));
	still_interrupted(&call, id);
	ck_assert_int_eq(carmy_resolve(c, &call, id, 1, CARMY_STATUS_COMPLETED,
				       "{\"order_id\":5}", 14),
			 CARMY_EINVALID_RESULT);
	still_interrupted(&call, id);
	ck_assert_int_eq(carmy_resolve(c, &call, id, 1, CARMY_STATUS_COMPLETED,
				       good, sizeof(good)), 0);
	carmy_close(c);
	c = NULL;

	e2e_kill9(&d);
	ck_assert_int_eq(shm_unlink(d.segment), 0);
	e2e_restart(&d, opts);
	c = e2e_connect(&d);
	replays(&call, id, good, sizeof(good));
	call_of(d.segment, id, &cl);
	ck_assert_uint_eq(cl.cl_format, CARMY_FORMAT_EXIT_OUTPUT);
	ck_assert_mem_eq(cl.cl_data, "bash", 4);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}
END_TEST

/* try_begin of call: want, and for CARMY_REPLAY the result "ok". */
static void try_begin(const struct carmy_call *call, int want)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	ck_assert_int_eq(carmy_try_begin(c, call, &r), want);
	if (want == CARMY_REPLAY) {
		ck_assert_uint_eq(r.result_len, 2);
		ck_assert_mem_eq(r.result, "ok", 2);
	}
	if (want == -EAGAIN)
		ck_assert_str_eq(r.execution_id, "");
	carmy_reservation_clear(&r);
}

/* try_begin of call, running as execution id: CARMY_EUNCERTAIN. */
static void try_running(const struct carmy_call *call, const char *id)
{
	uncertain(carmy_try_begin, call, CARMY_STATE_RUNNING, id);
}

/* carmy_begin() reserves call, and it completes with "ok". */
static void run(const struct carmy_call *call)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	ck_assert_int_eq(carmy_begin(c, call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok",
					2), 0);
	carmy_reservation_clear(&r);
}

/*
 * With the memory store carmy_try_begin() reserves, replays and finds
 * conflicts itself. With a journal a new reservation needs carmyd to record
 * it: -EAGAIN, nothing reserved, and carmy_begin() then reserves. A call
 * running, its reservation recorded, is answered CARMY_EUNCERTAIN. A
 * stopped carmyd (SIGSTOP) still has its replays and running calls
 * answered, and a new call answered -EAGAIN at once: a wait for it would
 * never end, and the test would time out.
 */
START_TEST(test_try_begin_answers_from_the_segment_only)
{
	static const uint8_t other[] = { 0x81, 0xa1, 'a', 0x01 };
	struct carmy_call call = E2E_CALL("p", "s", "try");
	struct carmy_call next = E2E_CALL("p", "s", "try-next");
	struct carmy_call held = E2E_CALL("p", "s", "try-held");
	struct carmy_call conflict = E2E_CALL("p", "s", "try");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char spec[128];
	const char *opts[] = { "--store", spec, NULL };

	conflict.args = other;
	conflict.args_len = sizeof(other);
	e2e_start(&d, NULL);
	c = e2e_connect(&d);
	ck_assert_int_eq(carmy_try_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok",
					2), 0);
	carmy_reservation_clear(&r);
	try_begin(&call, CARMY_REPLAY);
	try_begin(&conflict, CARMY_ECONFLICT);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);

	snprintf(spec, sizeof(spec), "journal:%s/j", dir);
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	try_begin(&call, -EAGAIN);
	run(&call);
	try_begin(&call, CARMY_REPLAY);
	try_begin(&conflict, -EAGAIN);
	/* Running, its reservation recorded: named from the segment. */
	ck_assert_int_eq(carmy_begin(c, &held, &r), CARMY_RESERVED);
	try_running(&held, r.execution_id);
	e2e_sigstop(d.pid);
	try_begin(&call, CARMY_REPLAY);
	try_begin(&next, -EAGAIN);
	try_running(&held, r.execution_id);
	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok",
					2), 0);
	carmy_reservation_clear(&r);
	try_begin(&held, CARMY_REPLAY);
	run(&next);
	try_begin(&next, CARMY_REPLAY);
	ck_assert_int_eq(carmy_begin(c, &conflict, &r), CARMY_ECONFLICT);
	carmy_reservation_clear(&r);
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("calls");
	TCase *tc = tcase_create("calls");
	SRunner *sr;
	int failed;

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_set_result_format_takes_only_the_two);
	tcase_add_test(tc, test_an_entry_keeps_its_call);
	tcase_add_test(tc, test_resolve_refuses_a_result_the_client_cannot_read);
	tcase_add_test(tc, test_opaque_results_take_any_bytes);
	tcase_add_test(tc, test_the_call_and_its_format_survive_a_reboot);
	tcase_add_test(tc, test_try_begin_answers_from_the_segment_only);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
