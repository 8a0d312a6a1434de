/*
 * check_request.c - the request-to-call conversion of POST /agent/execute
 * (gateway/execute.c), fuzzed: seed bodies mutated at random (bytes
 * flipped, inserted, deleted, cut; nesting, numbers, escapes, duplicate
 * keys spliced in) and bodies generated whole. Each is answered with no
 * carmyd to reach, so a body that passes every check gets 503
 * DAEMON_UNAVAILABLE (it got as far as the reservation: at once, or from
 * the thread its begin is handed to while no connect has been tried
 * lately) and any other a 400 or 404 error body. An independent check of
 * the same rules, written here with jansson, must agree on which bodies
 * pass; every answer must be one JSON object with the contract's error
 * fields. Run under ASan in the sanitised build.
 *
 * $CARMY_FUZZ_SEED and $CARMY_FUZZ_ROUNDS change the run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "common/log.h"
#include "gateway/gateway.h"

static struct gateway gw;
static char dir[64];
static uint64_t rng;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* X-A: v, once; or, with hcls not NULL, as many times as *hcls. */
static const char *header(void *hcls, const char *name, unsigned *n)
{
	bool a = strcasecmp(name, "X-A") == 0;

	if (n != NULL)
		*n = !a ? 0 : hcls != NULL ? *(unsigned *)hcls : 1;
	return a ? "v" : NULL;
}

static void setup(void)
{
	char path[256], err[256];
	FILE *f;

	log_level = LOG_ERROR;	/* "cannot reach carmyd", every time */
	/* Each test makes its own (with CK_FORK=no they share a process). */
	strcpy(dir, "/tmp/carmy-gw-check.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tools.json", dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("{\"tools\": {\"t\": {\"command\": [\"/bin/true\"], "
	      "\"fingerprint_headers\": [\"X-A\"]}}}", f);
	fclose(f);
	/* Whatever the umask: a tools file others may write is refused. */
	ck_assert_int_eq(chmod(path, 0644), 0);
	ck_assert_msg(gw_tools_load(path, &gw.tools, err, sizeof(err)) == 0,
		      "%s", err);
	unlink(path);
	snprintf(path, sizeof(path), "%s/none.sock", dir);
	gw_carmyd_init(&gw.carmyd, strdup(path));
	gw_run_init(&gw);
	gw.max_running = 4;
}

static void teardown(void)
{
	/* Every slot taken was given back. */
	ck_assert_uint_eq(gw.slots, 0);
	gw_tools_free(&gw.tools);
	free((char *)gw.carmyd.socket);
	rmdir(dir);
}

static int depth(json_t *v)
{
	const char *k;
	json_t *e;
	size_t i;
	int d = 0, de;

	if (json_is_object(v)) {
		json_object_foreach(v, k, e)
			if ((de = depth(e)) > d)
				d = de;
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, e)
			if ((de = depth(e)) > d)
				d = de;
	} else {
		return 0;
	}
	return d + 1;
}

/* The rules, again: does this body pass every check? */
static bool passes(const char *body, size_t len)
{
	json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *tool, *args, *rid;
	bool ok;

	if (o == NULL)
		return false;
	tool = json_object_get(o, "tool");
	args = json_object_get(o, "arguments");
	rid = json_object_get(o, "request_id");
	ok = json_is_object(o) &&
	     json_object_size(o) == (size_t)(1 + (args != NULL) +
					     (rid != NULL)) &&
	     json_is_string(tool) && json_string_length(tool) == 1 &&
	     strcmp(json_string_value(tool), "t") == 0 &&
	     (args == NULL || (json_is_object(args) &&
			       depth(args) <= GW_ARGS_DEPTH_MAX)) &&
	     (rid == NULL || (json_is_string(rid) &&
			      json_string_length(rid) == 1 &&
			      json_string_value(rid)[0] == 'k'));
	json_decref(o);
	return ok;
}

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static bool answered;

static void on_done(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&done_lock);
	answered = true;
	pthread_cond_signal(&done_cond);
	pthread_mutex_unlock(&done_lock);
}

/* gw_execute(), and the execution it hands over (a begin that must wait
 * for carmyd) run to its end, as http.c would. */
static void execute(const struct gw_request *rq, struct gw_answer *a)
{
	struct gw_exec *x = NULL;

	answered = false;
	if (gw_execute(rq, a, on_done, NULL, &x) == 0) {
		ck_assert_ptr_null(x);
		return;
	}
	ck_assert_ptr_nonnull(x);
	gw_exec_start(x);
	pthread_mutex_lock(&done_lock);
	while (!answered)
		pthread_cond_wait(&done_cond, &done_lock);
	pthread_mutex_unlock(&done_lock);
	pthread_mutex_lock(&gw.run_lock);
	while (gw.running != 0)
		pthread_cond_wait(&gw.run_idle, &gw.run_lock);
	pthread_mutex_unlock(&gw.run_lock);
}

/* Answer one body and check the answer; true if the body passed. */
static bool check_one(const char *body, size_t len)
{
	struct gw_request rq = {
		.gw = &gw, .principal = "p", .key = "k", .header = header,
		.body = body, .len = len,
	};
	struct gw_answer a = { 0 };
	json_t *o, *e;
	const char *code;
	bool pass = passes(body, len);

	execute(&rq, &a);
	ck_assert(a.len > 0 && a.body[a.len - 1] == '\n');
	o = json_loadb(a.body, a.len, 0, NULL);
	ck_assert_msg(json_is_object(o), "not JSON: %s", a.body);
	e = json_object_get(o, "error");
	code = json_string_value(json_object_get(e, "code"));
	ck_assert_ptr_nonnull(code);
	ck_assert(json_is_string(json_object_get(e, "message")) &&
		  json_is_string(json_object_get(e, "category")) &&
		  json_is_boolean(json_object_get(e, "recoverable")) &&
		  json_is_boolean(json_object_get(e, "retryable")));
	if (pass)
		ck_assert_msg(a.status == 503 &&
			      strcmp(code, "DAEMON_UNAVAILABLE") == 0,
			      "%.*s: %u %s", (int)len, body, a.status, code);
	else
		ck_assert_msg(a.status == 400 || a.status == 404,
			      "%.*s: %u %s", (int)len, body, a.status, code);
	json_decref(o);
	gw_answer_free(&a);
	return pass;
}

static const char *const seeds[] = {
	"{\"tool\":\"t\",\"arguments\":{\"a\":[1,2.5,{\"b\":null}],"
	"\"c\":\"\\u00e9\"},\"request_id\":\"k\"}",
	"{\"tool\":\"t\"}",
	"{\"tool\":\"t\",\"arguments\":{}}",
	"{\"arguments\":{\"x\":true,\"y\":false},\"tool\":\"t\"}",
	"{\"tool\":\"u\",\"request_id\":\"k\"}",
	"[{\"tool\":\"t\"}]",
};

static const char *const pieces[] = {
	"{", "}", "[", "]", ",", ":", "\"", "\\", "\\u0000", "\\ud800",
	"\xff", "\xc3\xa9", "1e999", "-0", "99999999999999999999", "null",
	"\"tool\":\"t\"", "\"request_id\":\"j\"", "\"arguments\":[]",
	"\"extra\":1", "   ", "\n",
};

static size_t mutate(char *buf, size_t len, size_t cap)
{
	int n = (int)(next() % 4);	/* 0: the seed as it is */

	while (n-- > 0) {
		size_t at = len > 0 ? next() % (len + 1) : 0;
		const char *p;
		size_t pl;

		switch (next() % 5) {
		case 0:		/* flip a byte */
			if (len > 0 && at < len)
				buf[at] = (char)next();
			break;
		case 1:		/* delete a run */
			if (at < len) {
				size_t k = 1 + next() % (len - at);

				memmove(buf + at, buf + at + k, len - at - k);
				len -= k;
			}
			break;
		case 2:		/* cut */
			len = at;
			break;
		default:	/* insert a piece */
			p = pieces[next() % (sizeof(pieces) / sizeof(*pieces))];
			pl = strlen(p);
			if (len + pl <= cap) {
				memmove(buf + at + pl, buf + at, len - at);
				memcpy(buf + at, p, pl);
				len += pl;
			}
			break;
		}
	}
	return len;
}

/* A body with "arguments" nested d deep. */
static size_t nested(char *buf, size_t cap, int d)
{
	size_t n = (size_t)snprintf(buf, cap, "{\"tool\":\"t\",\"arguments\":");

	for (int i = 0; i < d - 1 && n + 8 < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "{\"a\":");
	n += (size_t)snprintf(buf + n, cap - n, "{}");
	for (int i = 0; i < d - 1 && n + 2 < cap; i++)
		buf[n++] = '}';
	buf[n++] = '}';
	return n;
}

START_TEST(test_seeds_and_nesting)
{
	char buf[4096];

	for (size_t i = 0; i < sizeof(seeds) / sizeof(*seeds); i++)
		check_one(seeds[i], strlen(seeds[i]));
	/* The deepest arguments that pass, and one level more. */
	for (int d = GW_ARGS_DEPTH_MAX - 1; d <= GW_ARGS_DEPTH_MAX + 2; d++)
		check_one(buf, nested(buf, sizeof(buf), d));
}
END_TEST

START_TEST(test_mutated_bodies)
{
	const char *s = getenv("CARMY_FUZZ_SEED");
	const char *r = getenv("CARMY_FUZZ_ROUNDS");
	long rounds = r != NULL ? atol(r) : 20000;
	char buf[2048];
	long passed = 0;

	rng = s != NULL ? strtoull(s, NULL, 0) : 0x9e3779b97f4a7c15ull;
	if (rng == 0)
		rng = 1;
	for (long i = 0; i < rounds; i++) {
		const char *seed = seeds[next() % (sizeof(seeds) /
						   sizeof(*seeds))];
		size_t len = strlen(seed);

		memcpy(buf, seed, len);
		len = mutate(buf, len, sizeof(buf));
		passed += check_one(buf, len);
	}
	/* Both sides of every check were taken, many times. */
	ck_assert_msg(passed > rounds / 20 && rounds - passed > rounds / 20,
		      "%ld of %ld bodies passed", passed, rounds);
}
END_TEST

START_TEST(test_tokens_compare_whole)
{
	struct gw_token v[2] = {
		{ "tok-aaaa", 8, "alice" }, { "tok-bbbbbb", 10, "bob" },
	};
	struct gw_tokens t = { v, 2 };

	ck_assert_str_eq(gw_token_principal(&t, "tok-aaaa", 8), "alice");
	ck_assert_str_eq(gw_token_principal(&t, "tok-bbbbbb", 10), "bob");
	ck_assert_ptr_null(gw_token_principal(&t, "tok-aaa", 7));
	ck_assert_ptr_null(gw_token_principal(&t, "tok-aaaaa", 9));
	ck_assert_ptr_null(gw_token_principal(&t, "tok-aaaatok-aaaa", 16));
	ck_assert_ptr_null(gw_token_principal(&t, "", 0));
	ck_assert_ptr_null(gw_token_principal(&t, "tok-bbbbbc", 10));
}
END_TEST

/* RFC 9110 5.5: a field value is taken without leading and trailing SP
 * and HTAB; blanks inside stay, and blanks alone are empty. */
START_TEST(test_field_trim)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "sp", "sp" }, { "sp ", "sp" }, { " \tsp\t ", "sp" },
		{ "a b", "a b" }, { "\"k\" ", "\"k\"" }, { "", "" },
		{ " \t ", "" }, { "x\r", "x\r" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		size_t len;
		const char *v = gw_field_trim(cases[i].in, &len);

		ck_assert_msg(len == strlen(cases[i].out) &&
			      memcmp(v, cases[i].out, len) == 0,
			      "'%s': '%.*s'", cases[i].in, (int)len, v);
	}
}
END_TEST

/* a is status with an error body of code want; a is freed. */
static void expect_code(struct gw_answer *a, unsigned status,
			const char *want)
{
	json_t *o = json_loadb(a->body, a->len, 0, NULL);
	const char *code = json_string_value(
		json_object_get(json_object_get(o, "error"), "code"));

	ck_assert_msg(a->status == status && code != NULL &&
		      strcmp(code, want) == 0, "%u %s, not %u %s", a->status,
		      a->body, status, want);
	json_decref(o);
	gw_answer_free(a);
}

/* Every slot taken: a call that would need a thread is refused 503
 * OVERLOADED at once, with Retry-After, and takes no slot; with a slot
 * free the same call goes on (to carmyd, here absent). */
START_TEST(test_full_gateway_refuses_overloaded)
{
	const char *with = "{\"tool\":\"t\",\"request_id\":\"k\"}";
	struct gw_request rq = {
		.gw = &gw, .principal = "p", .header = header,
		.body = with, .len = strlen(with),
	};
	const char *without = "{\"tool\":\"t\"}";
	struct gw_answer a = { 0 };
	struct gw_exec *x = NULL;

	gw.max_running = 1;
	ck_assert(gw_slot_take(&gw, false));
	ck_assert(!gw_slot_take(&gw, false));
	/* Not within GW_RECONNECT_MS of a failed connect: the begin would
	 * go to a thread, to connect. */
	gw.carmyd.last_fail_ns = 0;
	ck_assert_int_eq(gw_execute(&rq, &a, on_done, NULL, &x), 0);
	ck_assert_ptr_null(x);
	ck_assert(a.retry_after);
	expect_code(&a, 503, "OVERLOADED");
	rq.body = without;
	rq.len = strlen(without);
	ck_assert_int_eq(gw_execute(&rq, &a, on_done, NULL, &x), 0);
	ck_assert_ptr_null(x);
	expect_code(&a, 503, "OVERLOADED");
	ck_assert_uint_eq(gw.slots, 1);
	/* Unauthenticated: 401, whatever the slots. */
	rq.principal = NULL;
	ck_assert_int_eq(gw_execute(&rq, &a, on_done, NULL, &x), 0);
	expect_code(&a, 401, "UNAUTHENTICATED");
	gw_slot_put(&gw);
	rq.principal = "p";
	rq.body = with;
	rq.len = strlen(with);
	gw.carmyd.last_fail_ns = 0;
	execute(&rq, &a);
	expect_code(&a, 503, "DAEMON_UNAVAILABLE");
	ck_assert_uint_eq(gw.slots, 0);
	gw.max_running = 4;
}
END_TEST

/* A fingerprint header given twice: 400, naming it, before anything is
 * reserved or a slot taken; once, the call goes on. */
START_TEST(test_repeated_fingerprint_header_refused)
{
	const char *body = "{\"tool\":\"t\",\"request_id\":\"k\"}";
	unsigned times = 2;
	struct gw_request rq = {
		.gw = &gw, .principal = "p", .header = header, .hcls = &times,
		.body = body, .len = strlen(body),
	};
	struct gw_answer a = { 0 };
	struct gw_exec *x = NULL;

	ck_assert_int_eq(gw_execute(&rq, &a, on_done, NULL, &x), 0);
	ck_assert_ptr_null(x);
	ck_assert_msg(strstr(a.body, "x-a") != NULL, "%s", a.body);
	expect_code(&a, 400, "INVALID_REQUEST");
	ck_assert_uint_eq(gw.slots, 0);
	times = 1;
	gw.carmyd.last_fail_ns = 0;
	execute(&rq, &a);
	expect_code(&a, 503, "DAEMON_UNAVAILABLE");
}
END_TEST

/* A tools file naming one fingerprint header twice (in any case) is
 * refused, with the tool and the header named. */
START_TEST(test_tools_file_repeated_fingerprint_header_refused)
{
	struct gw_tools t;
	char path[256], err[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/twice.json", dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("{\"tools\": {\"t2\": {\"command\": [\"/bin/true\"], "
	      "\"fingerprint_headers\": [\"X-Tenant\", \"X-B\", "
	      "\"x-tenant\"]}}}", f);
	fclose(f);
	ck_assert_int_eq(chmod(path, 0644), 0);
	ck_assert_int_eq(gw_tools_load(path, &t, err, sizeof(err)), -1);
	unlink(path);
	ck_assert_msg(strstr(err, "tool t2") != NULL &&
		      strstr(err, "x-tenant twice") != NULL, "%s", err);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gateway_request");
	TCase *tc = tcase_create("request");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_seeds_and_nesting);
	tcase_add_test(tc, test_mutated_bodies);
	tcase_add_test(tc, test_tokens_compare_whole);
	tcase_add_test(tc, test_field_trim);
	tcase_add_test(tc, test_full_gateway_refuses_overloaded);
	tcase_add_test(tc, test_repeated_fingerprint_header_refused);
	tcase_add_test(tc, test_tools_file_repeated_fingerprint_header_refused);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
