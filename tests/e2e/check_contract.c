/*
 * check_contract.c - Carmy's contract against a real carmyd: identity,
 * fingerprint, execution ids, the four rows, recorded statuses, release,
 * and what a client is told when there is no carmyd.
 *
 * Each test gets its own carmyd (capacity CAP) and one connected handle.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

#define CAP 16
#define MAX_RESULT 1024

static struct carmyd_proc d;
static carmy_t *c;

static void setup(void)
{
	static const char *const opts[] = { "--capacity", "16",
					    "--max-result", "1024", NULL };

	e2e_start(&d, opts);
	c = e2e_connect(&d);
}

static void teardown(void)
{
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}

static struct carmy_call with_args(struct carmy_call call, const void *args,
				   size_t len)
{
	call.args = args;
	call.args_len = len;
	return call;
}

/* begin must give want; returns it for chaining into asserts. */
static void expect_begin(carmy_t *h, const struct carmy_call *call,
			 struct carmy_reservation *r, int want)
{
	int rc = carmy_begin(h, call, r);

	ck_assert_msg(rc == want, "begin gave %s, wanted %s", carmy_errname(rc),
		      carmy_errname(want));
}

/* Reserve n fresh identities "fill-<i>" and then prove the (n+1)th is
 * refused: the table had exactly n free entries. */
static void expect_room_for_exactly(carmy_t *h, int n)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char rid[32];
	int rc;

	for (int i = 0; i <= n; i++) {
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "fill-%d", i);
		call = E2E_CALL("room", "s", rid);
		rc = carmy_begin(h, &call, &r);
		ck_assert_msg(rc == (i < n ? CARMY_RESERVED : CARMY_ECAPACITY),
			      "new identity %d of %d: %s", i + 1, n,
			      carmy_errname(rc));
	}
	carmy_reservation_clear(&r);
}

/* ------------------------------------------------------------ identity */

START_TEST(test_identity_parts_of_1_and_256_bytes_are_accepted)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char big[CARMY_ID_MAX];
	struct carmy_call call;

	memset(big, 'x', sizeof(big));
	call = E2E_CALL("p", "s", "r");
	expect_begin(c, &call, &r, CARMY_RESERVED);
	call.principal = big;
	call.principal_len = CARMY_ID_MAX;
	call.session = big;
	call.session_len = CARMY_ID_MAX;
	call.request_id = big;
	call.request_id_len = CARMY_ID_MAX;
	expect_begin(c, &call, &r, CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "256", 3), 0);
	expect_begin(c, &call, &r, CARMY_REPLAY);
	ck_assert_str_eq(r.result, "256");
	/* Binary identity bytes, NULs included, are opaque. */
	call.principal = "\0\xff\0";
	call.principal_len = 3;
	expect_begin(c, &call, &r, CARMY_RESERVED);
	call.principal = "\0\xff\1";
	expect_begin(c, &call, &r, CARMY_RESERVED);
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_empty_or_257_byte_part_is_invalid_and_reserves_nothing)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char big[CARMY_ID_MAX + 1];

	memset(big, 'y', sizeof(big));
	for (int part = 0; part < 3; part++) {
		for (int bad = 0; bad < 3; bad++) {
			struct carmy_call call = E2E_CALL("p", "s", "r");
			const void **ptr = part == 0 ? &call.principal :
					   part == 1 ? &call.session :
						       &call.request_id;
			size_t *len = part == 0 ? &call.principal_len :
				      part == 1 ? &call.session_len :
						  &call.request_id_len;

			if (bad == 0) {		/* empty */
				*len = 0;
			} else if (bad == 1) {	/* one byte too long */
				*ptr = big;
				*len = CARMY_ID_MAX + 1;
			} else {		/* NULL */
				*ptr = NULL;
				*len = 0;
			}
			for (int i = 0; i < 3; i++)	/* retries, too */
				expect_begin(c, &call, &r, CARMY_EINVALID_ID);
			ck_assert_str_eq(r.execution_id, "");
		}
	}
	/* Nothing was taken: the whole capacity is still there, and the
	 * shortened-to-valid identity is new. */
	expect_room_for_exactly(c, CAP);
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_identities_differing_in_one_part_are_independent)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	const char *ids[][3] = {
		{ "alice", "s1", "req" }, { "bob", "s1", "req" },
		{ "alice", "s2", "req" }, { "alice", "s1", "req2" },
		{ "alicf", "s1", "req" }, { "alice", "s1", "reR" },
	};
	char exec[6][CARMY_EXECUTION_ID_LEN + 1];

	for (int i = 0; i < 6; i++) {
		struct carmy_call call = E2E_CALL(ids[i][0], ids[i][1], ids[i][2]);

		expect_begin(c, &call, &r, CARMY_RESERVED);
		strcpy(exec[i], r.execution_id);
		/* Finish every other one: each keeps its own state. */
		if (i % 2 == 0)
			ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED,
							ids[i][0], strlen(ids[i][0])), 0);
	}
	for (int i = 0; i < 6; i++) {
		struct carmy_call call = E2E_CALL(ids[i][0], ids[i][1], ids[i][2]);

		expect_begin(c, &call, &r, i % 2 == 0 ? CARMY_REPLAY :
							 CARMY_EUNCERTAIN);
		ck_assert_str_eq(r.execution_id, exec[i]);
		if (i % 2 == 0)
			ck_assert_str_eq(r.result, ids[i][0]);
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(exec[i], exec[j]);
	}
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_identity_parts_do_not_slide_into_each_other)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call a = E2E_CALL("ab", "c", "x");
	struct carmy_call b = E2E_CALL("a", "bc", "x");
	struct carmy_call e = E2E_CALL("a", "b", "cx");
	char first[CARMY_EXECUTION_ID_LEN + 1];

	expect_begin(c, &a, &r, CARMY_RESERVED);
	strcpy(first, r.execution_id);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ab|c", 4), 0);
	/* If parts slid, these would replay "ab|c". */
	expect_begin(c, &b, &r, CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, first);
	expect_begin(c, &e, &r, CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, first);
	expect_begin(c, &a, &r, CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, first);
	carmy_reservation_clear(&r);
}
END_TEST

/* ------------------------------------------------------------ fingerprint */

START_TEST(test_key_order_and_integer_width_are_the_same_call)
{
	/* {"sku":"KB-01","qty":5} in four legal encodings. */
	static const uint8_t plain[] = {
		0x82, 0xa3, 's', 'k', 'u', 0xa5, 'K', 'B', '-', '0', '1',
		0xa3, 'q', 't', 'y', 0x05 };
	static const uint8_t swapped_u32[] = {
		0x82, 0xa3, 'q', 't', 'y', 0xce, 0, 0, 0, 5,
		0xa3, 's', 'k', 'u', 0xa5, 'K', 'B', '-', '0', '1' };
	static const uint8_t map16_str8_u8[] = {
		0xde, 0x00, 0x02, 0xd9, 3, 'q', 't', 'y', 0xcc, 0x05,
		0xd9, 3, 's', 'k', 'u', 0xd9, 5, 'K', 'B', '-', '0', '1' };
	static const uint8_t int64[] = {
		0x82, 0xa3, 's', 'k', 'u', 0xa5, 'K', 'B', '-', '0', '1',
		0xa3, 'q', 't', 'y', 0xd3, 0, 0, 0, 0, 0, 0, 0, 5 };
	/* {"o":{"x":1,"y":-1}} and {"o":{"y":int8 -1,"x":uint16 1}} */
	static const uint8_t nested[] = {
		0x81, 0xa1, 'o', 0x82, 0xa1, 'x', 0x01, 0xa1, 'y', 0xff };
	static const uint8_t nested_wide[] = {
		0x81, 0xa1, 'o', 0x82, 0xa1, 'y', 0xd0, 0xff, 0xa1, 'x',
		0xcd, 0x00, 0x01 };
	static const uint8_t meta[] = { 0x82, 0xa1, 'a', 1, 0xa1, 'b', 2 };
	static const uint8_t meta_swapped[] = { 0x82, 0xa1, 'b', 0xcc, 2, 0xa1, 'a', 1 };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	const struct { const uint8_t *p; size_t n; } same[] = {
		{ plain, sizeof(plain) }, { swapped_u32, sizeof(swapped_u32) },
		{ map16_str8_u8, sizeof(map16_str8_u8) }, { int64, sizeof(int64) },
	};
	struct carmy_call call;
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	call = with_args(E2E_CALL("p", "s", "order-7f3"), plain, sizeof(plain));
	call.tool = "create_order";
	call.tool_len = strlen("create_order");
	call.meta = meta;
	call.meta_len = sizeof(meta);
	expect_begin(c, &call, &r, CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	/* While running, the same call in another encoding is uncertain... */
	call.args = swapped_u32;
	call.args_len = sizeof(swapped_u32);
	call.meta = meta_swapped;
	call.meta_len = sizeof(meta_swapped);
	{
		struct carmy_reservation u = CARMY_RESERVATION_INIT;

		expect_begin(c, &call, &u, CARMY_EUNCERTAIN);
		ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);
		ck_assert_str_eq(u.execution_id, exec);
		carmy_reservation_clear(&u);
	}
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED,
					"{\"order_id\":1}", 14), 0);
	/* ... and once done, every encoding replays it. */
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		call.args = same[i].p;
		call.args_len = same[i].n;
		call.meta = i % 2 ? meta : meta_swapped;
		call.meta_len = i % 2 ? sizeof(meta) : sizeof(meta_swapped);
		expect_begin(c, &call, &r, CARMY_REPLAY);
		ck_assert_str_eq(r.execution_id, exec);
		ck_assert_str_eq(r.result, "{\"order_id\":1}");
	}

	call = with_args(E2E_CALL("p", "s", "nested"), nested, sizeof(nested));
	expect_begin(c, &call, &r, CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "n", 1), 0);
	call = with_args(call, nested_wide, sizeof(nested_wide));
	expect_begin(c, &call, &r, CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_different_args_tool_or_meta_is_a_conflict)
{
	static const uint8_t args[] = { 0x81, 0xa3, 'q', 't', 'y', 0x05 };
	static const uint8_t args6[] = { 0x81, 0xa3, 'q', 't', 'y', 0x06 };
	static const uint8_t args_float[] = { 0x81, 0xa3, 'q', 't', 'y',
					      0xca, 0x40, 0xa0, 0, 0 };
	static const uint8_t args_str[] = { 0x81, 0xa3, 'q', 't', 'y', 0xa1, '5' };
	static const uint8_t empty_map[] = { 0x80 };
	static const uint8_t meta[] = { 0x81, 0xa1, 'k', 0xa1, 'v' };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call base = with_args(E2E_CALL("p", "s", "r"), args,
					   sizeof(args));
	struct carmy_call v[8];
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	int n = 0;

	v[n] = base, v[n].args = args6, n++;
	v[n] = base, v[n].args = args_float, v[n].args_len = sizeof(args_float), n++;
	v[n] = base, v[n].args = args_str, v[n].args_len = sizeof(args_str), n++;
	v[n] = base, v[n].args = empty_map, v[n].args_len = 1, n++;
	v[n] = base, v[n].args = NULL, v[n].args_len = 0, n++;	/* absent */
	v[n] = base, v[n].tool = "toom", n++;
	v[n] = base, v[n].tool = "", v[n].tool_len = 0, n++;
	v[n] = base, v[n].meta = meta, v[n].meta_len = sizeof(meta), n++;

	expect_begin(c, &base, &r, CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok", 2), 0);
	for (int i = 0; i < n; i++) {
		expect_begin(c, &v[i], &r, CARMY_ECONFLICT);
		ck_assert_str_eq(r.execution_id, exec);
		ck_assert_int_eq(r.state, CARMY_STATE_COMPLETED);
		ck_assert_ptr_null(r.result);
	}
	/* The conflicts changed nothing. */
	expect_begin(c, &base, &r, CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
}
END_TEST

/* Tool, args and meta are length-delimited: bytes cannot move from one to
 * the next and still be the same call. */
START_TEST(test_fingerprint_parts_do_not_slide_into_each_other)
{
	static const uint8_t one[] = { 0x01 };
	static const uint8_t map[] = { 0x81, 0xa1, 'k', 0x01 };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call a = E2E_CALL("p", "s", "slide-1");
	struct carmy_call b, m;
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	/* tool "t\x01", no args  vs  tool "t", args 1 */
	a.tool = "t\x01";
	a.tool_len = 2;
	b = a;
	b.tool_len = 1;
	b.args = one;
	b.args_len = 1;
	expect_begin(c, &a, &r, CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "a", 1), 0);
	expect_begin(c, &b, &r, CARMY_ECONFLICT);
	ck_assert_str_eq(r.execution_id, exec);

	/* the same map as args or as meta */
	m = E2E_CALL("p", "s", "slide-2");
	m.args = map;
	m.args_len = sizeof(map);
	expect_begin(c, &m, &r, CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "m", 1), 0);
	m.args = NULL;
	m.args_len = 0;
	m.meta = map;
	m.meta_len = sizeof(map);
	expect_begin(c, &m, &r, CARMY_ECONFLICT);
	carmy_reservation_clear(&r);
}
END_TEST

/*
 * libcarmy computes a call's canonical fingerprint before it looks in the
 * table while a handle's recent begins were new calls, and only when the
 * table asks for it after a run of retries (client.c, fp_early). The
 * answers must not depend on which: each check below runs once after
 * three retries of the same bytes (late) and once after three new calls
 * (early), steered again before every begin since each begin moves it.
 */
static void steer(carmy_t *h, bool early)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("steer", "s", "done");
	char rid[32];

	for (int i = 0; i < 3; i++) {
		if (early) {
			snprintf(rid, sizeof(rid), "new-%d", i);
			call = E2E_CALL("steer", "s", rid);
			expect_begin(h, &call, &r, CARMY_RESERVED);
			ck_assert_int_eq(carmy_release(h, &r), 0);
		} else {
			expect_begin(h, &call, &r, CARMY_REPLAY);
		}
	}
	carmy_reservation_clear(&r);
}

START_TEST(test_answers_do_not_depend_on_when_the_fingerprint_is_computed)
{
	static const uint8_t ab[] = { 0x82, 0xa1, 'a', 1, 0xa1, 'b', 2 };
	static const uint8_t ba[] = { 0x82, 0xa1, 'b', 0xcc, 2, 0xa1, 'a', 1 };
	static const uint8_t ab3[] = { 0x82, 0xa1, 'a', 1, 0xa1, 'b', 3 };
	static const uint8_t dup[] = { 0x82, 0xa1, 'a', 1, 0xa1, 'a', 2 };
	static const uint8_t cut[] = { 0x82, 0xa1, 'a', 1, 0xa1 };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call done = E2E_CALL("steer", "s", "done"), call;
	char exec[CARMY_EXECUTION_ID_LEN + 1], rid[32];

	expect_begin(c, &done, &r, CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "d", 1), 0);
	for (int early = 0; early < 2; early++) {
		/* A call completed with its keys in one order... */
		snprintf(rid, sizeof(rid), "kept-%d", early);
		call = with_args(E2E_CALL("p", "s", rid), ab, sizeof(ab));
		steer(c, early);
		expect_begin(c, &call, &r, CARMY_RESERVED);
		strcpy(exec, r.execution_id);
		ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED,
						"ok", 2), 0);
		/* ... replays for the other order and a wider integer... */
		call = with_args(call, ba, sizeof(ba));
		steer(c, early);
		expect_begin(c, &call, &r, CARMY_REPLAY);
		ck_assert_str_eq(r.execution_id, exec);
		/* ... conflicts with another value... */
		call = with_args(call, ab3, sizeof(ab3));
		steer(c, early);
		expect_begin(c, &call, &r, CARMY_ECONFLICT);
		ck_assert_str_eq(r.execution_id, exec);
		/* ... and bad arguments are refused, for it or a new one. */
		call = with_args(call, dup, sizeof(dup));
		steer(c, early);
		expect_begin(c, &call, &r, CARMY_EINVALID_ARGS);
		call = with_args(E2E_CALL("p", "s", "never"), cut, sizeof(cut));
		steer(c, early);
		expect_begin(c, &call, &r, CARMY_EINVALID_ARGS);
	}
	/* Nothing but the two calls and "done" holds an entry. */
	expect_room_for_exactly(c, CAP - 3);
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_invalid_msgpack_args_are_refused_and_reserve_nothing)
{
	static const struct { const char *why; uint8_t b[8]; size_t n; } bad[] = {
		{ "reserved byte", { 0xc1 }, 1 },
		{ "truncated str", { 0xa3, 's' }, 2 },
		{ "trailing bytes", { 0x01, 0x02 }, 2 },
		{ "short array", { 0x92, 0x01 }, 2 },
		{ "duplicate keys", { 0x82, 0xa1, 'a', 1, 0xa1, 'a', 2 }, 7 },
		{ "array32 of 4G", { 0xdd, 0xff, 0xff, 0xff, 0xff }, 5 },
		{ "map32 of 4G", { 0xdf, 0xff, 0xff, 0xff, 0xff }, 5 },
		{ "bin32 of 4G", { 0xc6, 0xff, 0xff, 0xff, 0xff, 0 }, 6 },
	};
	uint8_t deep[40];
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		call = with_args(E2E_CALL("p", "s", "r"), bad[i].b, bad[i].n);
		ck_assert_msg(carmy_begin(c, &call, &r) == CARMY_EINVALID_ARGS,
			      "args with %s were accepted", bad[i].why);
		call.args = NULL;
		call.meta = bad[i].b;
		call.meta_len = bad[i].n;
		ck_assert_msg(carmy_begin(c, &call, &r) == CARMY_EINVALID_ARGS,
			      "meta with %s was accepted", bad[i].why);
	}
	memset(deep, 0x91, sizeof(deep));	/* 39 nested arrays, then 1 */
	deep[sizeof(deep) - 1] = 0x01;
	call = with_args(E2E_CALL("p", "s", "r"), deep, sizeof(deep));
	expect_begin(c, &call, &r, CARMY_EINVALID_ARGS);
	call = with_args(E2E_CALL("p", "s", "r"), NULL, 3);
	expect_begin(c, &call, &r, CARMY_EINVALID_ARGS);
	/* The identity is still new, and the capacity whole. */
	expect_room_for_exactly(c, CAP);
	carmy_reservation_clear(&r);
}
END_TEST

/* ------------------------------------------------------------ the four rows */

START_TEST(test_new_identity_is_reserved_with_a_fresh_execution_id)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char seen[CAP][CARMY_EXECUTION_ID_LEN + 1];
	carmy_t *c2 = e2e_connect(&d);

	for (int i = 0; i < CAP; i++) {
		char rid[32];
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "new-%d", i);
		call = E2E_CALL("p", "s", rid);
		expect_begin(i % 2 ? c2 : c, &call, &r, CARMY_RESERVED);
		ck_assert_msg(e2e_exec_id_valid(r.execution_id),
			      "bad execution id '%s'", r.execution_id);
		ck_assert_int_eq(r.state, CARMY_STATE_RUNNING);
		strcpy(seen[i], r.execution_id);
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(seen[i], seen[j]);
		/* Release half of them: a re-reservation gets a new id. */
		if (i % 4 == 0) {
			ck_assert_int_eq(carmy_release(i % 2 ? c2 : c, &r), 0);
			expect_begin(c, &call, &r, CARMY_RESERVED);
			ck_assert_str_ne(r.execution_id, seen[i]);
			ck_assert(e2e_exec_id_valid(r.execution_id));
		}
	}
	carmy_reservation_clear(&r);
	carmy_close(c2);
}
END_TEST

/* Execution ids come from a per-thread count (no locked add on the reserve
 * path): threads reserving on one handle at once, and threads started after
 * others ended, still never make the same id. */
#define ID_THREADS 4
#define ID_ROUNDS 300

struct id_worker {
	int n;
	pthread_t tid;
	char ids[ID_ROUNDS][CARMY_EXECUTION_ID_LEN + 1];
	int bad;		/* rounds not reserved, or bad ids */
};

static void *id_worker_run(void *arg)
{
	struct id_worker *w = arg;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	for (int i = 0; i < ID_ROUNDS; i++) {
		char rid[32];
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "thread-%d-%d", w->n, i);
		call = E2E_CALL("p", "s", rid);
		if (carmy_begin(c, &call, &r) != CARMY_RESERVED ||
		    !e2e_exec_id_valid(r.execution_id)) {
			w->bad++;
			continue;
		}
		strcpy(w->ids[i], r.execution_id);
	}
	carmy_reservation_clear(&r);
	return NULL;
}

static int cmp_id(const void *a, const void *b)
{
	return strcmp(a, b);
}

START_TEST(test_execution_ids_from_threads_never_repeat)
{
	static struct id_worker w[2 * ID_THREADS];
	static char all[2 * ID_THREADS * ID_ROUNDS][CARMY_EXECUTION_ID_LEN + 1];
	static const char *const opts[] = { "--capacity", "4096", NULL };
	int n = 0;

	/* Room for every reservation the threads make (none is released:
	 * release churn is another test's). */
	carmy_close(c);
	e2e_stop(&d);
	e2e_start(&d, opts);
	c = e2e_connect(&d);
	memset(w, 0, sizeof(w));
	/* Two waves: the second's threads may reuse the first's thread ids
	 * in the kernel, never their execution ids. */
	for (int wave = 0; wave < 2; wave++) {
		for (int t = wave * ID_THREADS; t < (wave + 1) * ID_THREADS; t++) {
			w[t].n = t;
			ck_assert_int_eq(pthread_create(&w[t].tid, NULL,
							id_worker_run, &w[t]), 0);
		}
		for (int t = wave * ID_THREADS; t < (wave + 1) * ID_THREADS; t++)
			ck_assert_int_eq(pthread_join(w[t].tid, NULL), 0);
	}
	for (int t = 0; t < 2 * ID_THREADS; t++) {
		ck_assert_int_eq(w[t].bad, 0);
		for (int i = 0; i < ID_ROUNDS; i++)
			strcpy(all[n++], w[t].ids[i]);
	}
	qsort(all, (size_t)n, sizeof(all[0]), cmp_id);
	for (int i = 1; i < n; i++)
		ck_assert_msg(strcmp(all[i - 1], all[i]) != 0,
			      "execution id %s made twice", all[i]);
	/* And this thread's own, on the same handle, are new too. */
	{
		struct carmy_reservation r = CARMY_RESERVATION_INIT;
		struct carmy_call call = E2E_CALL("p", "s", "main-thread");

		expect_begin(c, &call, &r, CARMY_RESERVED);
		ck_assert(bsearch(r.execution_id, all, (size_t)n,
				  sizeof(all[0]), cmp_id) == NULL);
		carmy_reservation_clear(&r);
	}
}
END_TEST

START_TEST(test_completed_call_replays_status_result_and_execution_id)
{
	static const char nul_result[] = "\0order\0\0id=1\xff\0";
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "abc");
	struct carmy_call empty = E2E_CALL("p", "s", "empty");
	struct carmy_call full = E2E_CALL("p", "s", "full");
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	uint8_t big[MAX_RESULT];
	carmy_t *c2 = e2e_connect(&d);

	expect_begin(c, &call, &r, CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, nul_result,
					sizeof(nul_result)), 0);
	for (int i = 0; i < 3; i++) {
		expect_begin(i % 2 ? c : c2, &call, &r, CARMY_REPLAY);
		ck_assert_str_eq(r.execution_id, exec);
		ck_assert_int_eq(r.state, CARMY_STATE_COMPLETED);
		ck_assert_int_eq(r.status, CARMY_STATUS_COMPLETED);
		ck_assert_int_eq(r.result_code, 0);
		ck_assert_uint_eq(r.result_len, sizeof(nul_result));
		ck_assert_mem_eq(r.result, nul_result, sizeof(nul_result));
	}
	/* A replay is not a reservation: it cannot be completed or released. */
	ck_assert_int_eq(carmy_complete(c2, &r, CARMY_STATUS_FAILED, "x", 1),
			 CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_release(c2, &r), CARMY_ENOT_RESERVED);

	expect_begin(c, &empty, &r, CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, NULL, 0), 0);
	expect_begin(c2, &empty, &r, CARMY_REPLAY);
	ck_assert_uint_eq(r.result_len, 0);

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);	/* NULs every 256 bytes */
	expect_begin(c, &full, &r, CARMY_RESERVED);
	ck_assert_uint_eq(carmy_max_result(c), MAX_RESULT);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, big,
					sizeof(big)), 0);
	expect_begin(c2, &full, &r, CARMY_REPLAY);
	ck_assert_uint_eq(r.result_len, sizeof(big));
	ck_assert_mem_eq(r.result, big, sizeof(big));
	carmy_reservation_clear(&r);
	carmy_close(c2);
}
END_TEST

START_TEST(test_same_call_while_running_is_uncertain)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "running");
	carmy_t *c2 = e2e_connect(&d);

	expect_begin(c, &call, &r, CARMY_RESERVED);
	for (int i = 0; i < 4; i++) {	/* the owner itself, too */
		expect_begin(i % 2 ? c : c2, &call, &u, CARMY_EUNCERTAIN);
		ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);
		ck_assert_str_eq(u.execution_id, r.execution_id);
		ck_assert_ptr_null(u.result);
		/* Being told "uncertain" gives no right to complete. */
		ck_assert_int_eq(carmy_complete(c2, &u, CARMY_STATUS_COMPLETED, "", 0),
				 CARMY_ENOT_RESERVED);
	}
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "done", 4), 0);
	expect_begin(c2, &call, &u, CARMY_REPLAY);
	ck_assert_str_eq(u.execution_id, r.execution_id);
	ck_assert_str_eq(u.result, "done");
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
	carmy_close(c2);
}
END_TEST

START_TEST(test_conflict_reports_existing_entry_in_every_state)
{
	static const uint8_t other[] = { 0x81, 0xa1, 'x', 0x02 };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	struct carmy_call run = E2E_CALL("p", "s", "c-running");
	struct carmy_call done = E2E_CALL("p", "s", "c-completed");
	struct carmy_call dead = E2E_CALL("p", "s", "c-interrupted");
	struct carmy_call alt;
	struct e2e_child ch;
	char done_exec[CARMY_EXECUTION_ID_LEN + 1];

	/* running */
	expect_begin(c, &run, &r, CARMY_RESERVED);
	alt = with_args(run, other, sizeof(other));
	expect_begin(c, &alt, &u, CARMY_ECONFLICT);
	ck_assert_str_eq(u.execution_id, r.execution_id);
	ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);

	/* completed */
	expect_begin(c, &done, &u, CARMY_RESERVED);
	strcpy(done_exec, u.execution_id);
	ck_assert_int_eq(carmy_complete(c, &u, CARMY_STATUS_COMPLETED, "d", 1), 0);
	alt = with_args(done, other, sizeof(other));
	expect_begin(c, &alt, &u, CARMY_ECONFLICT);
	ck_assert_str_eq(u.execution_id, done_exec);
	ck_assert_int_eq(u.state, CARMY_STATE_COMPLETED);

	/* interrupted: its owner, another process, is killed */
	e2e_child_reserve(&ch, d.socket, &dead, E2E_HOLD);
	kill(ch.pid, SIGKILL);
	ck_assert_int_eq(e2e_poll_begin(c, &dead, &u, CARMY_EUNCERTAIN,
					CARMY_STATE_INTERRUPTED, 2000, NULL),
			 CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_INTERRUPTED);
	alt = with_args(dead, other, sizeof(other));
	expect_begin(c, &alt, &u, CARMY_ECONFLICT);
	ck_assert_str_eq(u.execution_id, ch.exec);
	ck_assert_int_eq(u.state, CARMY_STATE_INTERRUPTED);
	e2e_child_reap(&ch);

	/* The running one is still completable by its owner. */
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "r", 1), 0);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
}
END_TEST

START_TEST(test_timeouts_cancellations_and_failures_replay_as_recorded)
{
	static const int statuses[] = { CARMY_STATUS_COMPLETED,
		CARMY_STATUS_FAILED, CARMY_STATUS_TIMED_OUT,
		CARMY_STATUS_CANCELLED };
	static const char *const names[] = { "completed", "failed",
					     "timed_out", "cancelled" };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char exec[4][CARMY_EXECUTION_ID_LEN + 1];

	for (int i = 0; i < 4; i++) {
		struct carmy_call call = E2E_CALL("p", "s", names[i]);

		expect_begin(c, &call, &r, CARMY_RESERVED);
		strcpy(exec[i], r.execution_id);
		/* An invalid status is refused and leaves it running. */
		ck_assert_int_eq(carmy_complete(c, &r, 0, "x", 1),
				 CARMY_EINVALID_STATUS);
		ck_assert_int_eq(carmy_complete(c, &r, 5, "x", 1),
				 CARMY_EINVALID_STATUS);
		ck_assert_int_eq(carmy_complete(c, &r, statuses[i], names[i],
						strlen(names[i])), 0);
	}
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 4; i++) {
			struct carmy_call call = E2E_CALL("p", "s", names[i]);

			/* A retry replays the timeout; it never runs again. */
			expect_begin(c, &call, &r, CARMY_REPLAY);
			ck_assert_int_eq(r.status, statuses[i]);
			ck_assert_str_eq(carmy_status_name(r.status), names[i]);
			ck_assert_int_eq(r.result_code, 0);
			ck_assert_str_eq(r.execution_id, exec[i]);
			ck_assert_str_eq(r.result, names[i]);
		}
	}
	carmy_reservation_clear(&r);
}
END_TEST

/* ------------------------------------------------------------ release */

START_TEST(test_release_frees_the_identity_and_only_once)
{
	static const uint8_t other[] = { 0x81, 0xa1, 'x', 0x02 };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "rel");
	struct carmy_call alt = with_args(call, other, sizeof(other));
	char first[CARMY_EXECUTION_ID_LEN + 1];
	carmy_t *c2 = e2e_connect(&d);

	expect_begin(c, &call, &r, CARMY_RESERVED);
	strcpy(first, r.execution_id);
	/* Only the owning handle may release or complete it. */
	ck_assert_int_eq(carmy_release(c2, &r), CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_complete(c2, &r, CARMY_STATUS_COMPLETED, "", 0),
			 CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	ck_assert_int_eq(carmy_release(c, &r), CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "", 0),
			 CARMY_ENOT_RESERVED);
	/* Released means never run: another call may take the identity. */
	expect_begin(c2, &alt, &u, CARMY_RESERVED);
	ck_assert_str_ne(u.execution_id, first);
	ck_assert_int_eq(carmy_complete(c2, &u, CARMY_STATUS_COMPLETED, "2", 1), 0);
	ck_assert_int_eq(carmy_complete(c2, &u, CARMY_STATUS_COMPLETED, "3", 1),
			 CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_release(c2, &u), CARMY_ENOT_RESERVED);
	expect_begin(c, &call, &r, CARMY_ECONFLICT);
	expect_begin(c, &alt, &r, CARMY_REPLAY);
	ck_assert_str_eq(r.result, "2");
	expect_room_for_exactly(c, CAP - 1);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
	carmy_close(c2);
}
END_TEST

/* A release frees its room at once, however many came before it: a burst
 * of begin/release (a tool refusing bad input, say) must not make the next
 * new identities fail with IDEMPOTENCY_CAPACITY. */
static void churn(int n)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	for (int i = 0; i < n; i++) {
		char rid[32];
		struct carmy_call x;

		snprintf(rid, sizeof(rid), "churn-%d", i);
		x = E2E_CALL("p", "s", rid);
		expect_begin(c, &x, &r, CARMY_RESERVED);
		ck_assert_int_eq(carmy_release(c, &r), 0);
	}
	carmy_reservation_clear(&r);
}

START_TEST(test_release_churn_gives_room_back_at_once)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char rid[32];
	int rc;

	/* 64 buckets for CAP 16: 49 released identities, then the full
	 * capacity of completed ones. carmyd may take a few of its ticks to
	 * give the room back, but all of it must come back. */
	churn(3 * CAP + 1);
	for (int i = 0; i <= CAP; i++) {
		struct carmy_call call;
		uint64_t t0 = harness_now_ns();

		snprintf(rid, sizeof(rid), "after-churn-%d", i);
		call = E2E_CALL("room", "s", rid);
		if (i == CAP) {
			expect_begin(c, &call, &r, CARMY_ECAPACITY);
			break;
		}
		rc = e2e_poll_begin(c, &call, &r, CARMY_RESERVED, -1, 1500, NULL);
		ck_assert_msg(rc == CARMY_RESERVED, "new identity %d of %d: still "
			      "%s %.0f ms after the releases", i + 1, CAP,
			      carmy_errname(rc), e2e_ms_since(t0));
		ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED,
						rid, strlen(rid)), 0);
	}
	carmy_reservation_clear(&r);
}
END_TEST

/* Even if room comes back late, it must come back: after as many releases
 * as there are buckets, carmyd's tick must make the table usable again. */
START_TEST(test_table_full_of_released_buckets_recovers)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call x = E2E_CALL("p", "s", "after-churn");
	uint64_t t0;
	int rc;

	churn(4 * CAP);
	t0 = harness_now_ns();
	rc = e2e_poll_begin(c, &x, &r, CARMY_RESERVED, -1, 2500, NULL);
	ck_assert_msg(rc == CARMY_RESERVED, "still %s %.0f ms after the last "
		      "release", carmy_errname(rc), e2e_ms_since(t0));
	ck_assert_int_eq(carmy_release(c, &r), 0);
	carmy_reservation_clear(&r);
}
END_TEST

/* ------------------------------------------------------------ names */

START_TEST(test_codes_have_the_spec_names)
{
	ck_assert_str_eq(carmy_errname(CARMY_EINVALID_ID), "INVALID_ID");
	ck_assert_str_eq(carmy_errname(CARMY_ECONFLICT), "IDEMPOTENCY_CONFLICT");
	ck_assert_str_eq(carmy_errname(CARMY_EUNCERTAIN), "EXECUTION_UNCERTAIN");
	ck_assert_str_eq(carmy_errname(CARMY_ECAPACITY), "IDEMPOTENCY_CAPACITY");
	ck_assert_str_eq(carmy_errname(CARMY_ERESULT_TOO_LARGE), "RESULT_TOO_LARGE");
	ck_assert_str_eq(carmy_errname(CARMY_EUNAVAILABLE), "DAEMON_UNAVAILABLE");
	ck_assert_str_eq(carmy_errname(CARMY_EFORKED), "FORKED");
	ck_assert_int_eq(CARMY_EFORKED, -1019);
	ck_assert_ptr_nonnull(strstr(carmy_strerror(CARMY_EFORKED), "fork"));
	ck_assert_str_eq(carmy_errname(CARMY_EINVALID_RESULT), "INVALID_RESULT");
	ck_assert_int_eq(CARMY_EINVALID_RESULT, -1020);
	/* Every code of Carmy's, the last one included, has its own name
	 * and sentence: none falls through to the errno tables. */
	for (int code = CARMY_EINVALID_ID; code >= CARMY_EINVALID_RESULT;
	     code--) {
		ck_assert_str_ne(carmy_errname(code), "SYSTEM_ERROR");
		ck_assert_str_ne(carmy_errname(code), "UNKNOWN_ERROR");
		ck_assert_str_ne(carmy_strerror(code), strerror(-code));
	}
	ck_assert_str_eq(carmy_state_name(CARMY_STATE_RUNNING), "running");
	ck_assert_str_eq(carmy_state_name(CARMY_STATE_INTERRUPTED), "interrupted");
	ck_assert_str_eq(carmy_status_name(CARMY_STATUS_TIMED_OUT), "timed_out");
	ck_assert_ptr_nonnull(carmy_strerror(-123456));
	ck_assert_ptr_nonnull(carmy_errname(-123456));
}
END_TEST

/* carmy.h: "Stable UPPER_SNAKE name of any code ("IDEMPOTENCY_CONFLICT",
 * "ENOENT"...)": -errno values pass through and keep their own names, so a
 * script can tell ENOENT from ECONNRESET. */
START_TEST(test_errno_codes_have_their_errno_names)
{
	ck_assert_str_eq(carmy_errname(-ENOENT), "ENOENT");
	ck_assert_str_ne(carmy_errname(-ECONNRESET), carmy_errname(-EBADF));
}
END_TEST

/* ------------------------------------------------------------ no carmyd */

/* A NULL where the API needs a pointer is refused, never followed. */
START_TEST(test_null_pointers_are_refused_with_einval)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "nulls");

	ck_assert_int_eq(carmy_begin(NULL, &call, &r), -EINVAL);
	ck_assert_int_eq(carmy_begin(c, NULL, &r), -EINVAL);
	ck_assert_int_eq(carmy_begin(c, &call, NULL), -EINVAL);
	ck_assert_int_eq(carmy_wait(NULL, &call, &r, 0), -EINVAL);
	ck_assert_int_eq(carmy_wait(c, NULL, &r, 0), -EINVAL);
	ck_assert_int_eq(carmy_wait(c, &call, NULL, 0), -EINVAL);
	ck_assert_int_eq(carmy_complete(NULL, &r, CARMY_STATUS_COMPLETED, "", 0),
			 -EINVAL);
	ck_assert_int_eq(carmy_complete(c, NULL, CARMY_STATUS_COMPLETED, "", 0),
			 -EINVAL);
	ck_assert_int_eq(carmy_release(NULL, &r), -EINVAL);
	ck_assert_int_eq(carmy_release(c, NULL), -EINVAL);
	ck_assert_int_eq(carmy_resolve(c, NULL, "exec_00000000000000000000000000000000",
				       1, CARMY_STATUS_COMPLETED, "", 0), -EINVAL);
	ck_assert_int_eq(carmy_resolve(c, &call, NULL, 1,
				       CARMY_STATUS_COMPLETED, "", 0), -EINVAL);
	ck_assert_int_eq(carmy_connect(NULL, NULL), -EINVAL);
	/* Nothing was reserved by any of them. */
	expect_begin(c, &call, &r, CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &r), 0);
	carmy_reservation_clear(&r);
}
END_TEST

START_TEST(test_connect_without_carmyd_is_unavailable)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char path[sizeof(sa.sun_path)];
	carmy_t *x = (carmy_t *)&x;
	int fd;

	ck_assert_int_eq(carmy_connect(&x, "/nonexistent-carmy/carmyd.sock"),
			 CARMY_EUNAVAILABLE);
	ck_assert_ptr_null(x);
	/* A socket file nobody listens on (a crashed carmyd's). */
	ck_assert_uint_lt(strlen(d.dir) + 12, sizeof(path));
	strcpy(path, d.dir);
	strcat(path, "/stale.sock");
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	ck_assert_int_eq(carmy_connect(&x, path), CARMY_EUNAVAILABLE);
	unlink(path);
	/* carmyd stopped: its socket is gone, and so is the service. */
	carmy_close(c);
	c = NULL;
	{
		char sock[sizeof(d.socket)];

		strcpy(sock, d.socket);
		e2e_stop(&d);
		ck_assert_int_eq(carmy_connect(&x, sock), CARMY_EUNAVAILABLE);
	}
	setenv("CARMY_SOCKET", "/nonexistent-carmy/env.sock", 1);
	ck_assert_int_eq(carmy_connect(&x, NULL), CARMY_EUNAVAILABLE);
	unsetenv("CARMY_SOCKET");
}
END_TEST

/* A carmy_wait() of a call on another handle, on a thread of its own. */
struct waited {
	carmy_t *h;
	struct carmy_call call;
	struct carmy_reservation r;
	int rc;
};

static void *wait_for(void *arg)
{
	struct waited *w = arg;

	w->rc = carmy_wait(w->h, &w->call, &w->r, 60000);
	return NULL;
}

/* A call its client lost track of (carmy_abandon()): uncertain at once
 * (interrupted), for every client and a waiter, until an operator
 * resolves it; neither completed nor freed. */
START_TEST(test_an_abandoned_call_is_uncertain_until_resolved)
{
	struct carmy_call call = E2E_CALL("p", "s", "abandoned");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation o = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	struct waited w = { .call = E2E_CALL("p", "s", "waited"),
			    .r = CARMY_RESERVATION_INIT };
	carmy_t *other = e2e_connect(&d);
	pthread_t t;

	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_abandon(c, &r), 0);
	ck_assert_int_eq(carmy_abandon(c, &r), CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "x", 1),
			 CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_release(c, &r), CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_begin(other, &call, &o), CARMY_EUNCERTAIN);
	ck_assert_int_eq(o.state, CARMY_STATE_INTERRUPTED);
	ck_assert_str_eq(o.execution_id, exec);
	ck_assert_int_eq(carmy_resolve(other, &call, exec, 1,
				       CARMY_STATUS_COMPLETED, "done", 4), 0);
	ck_assert_int_eq(carmy_begin(other, &call, &o), CARMY_REPLAY);
	ck_assert_str_eq(o.execution_id, exec);
	ck_assert_int_eq(carmy_abandon(other, &o), CARMY_ENOT_RESERVED);

	/* A waiter of the running call is told: interrupted, not a replay
	 * or a second run. */
	ck_assert_int_eq(carmy_begin(c, &w.call, &r), CARMY_RESERVED);
	w.h = other;
	ck_assert_int_eq(pthread_create(&t, NULL, wait_for, &w), 0);
	ck_assert_int_eq(carmy_abandon(c, &r), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(w.rc, CARMY_EUNCERTAIN);
	ck_assert_int_eq(w.r.state, CARMY_STATE_INTERRUPTED);
	ck_assert_str_eq(w.r.execution_id, r.execution_id);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&o);
	carmy_reservation_clear(&w.r);
	carmy_close(other);
}
END_TEST

static Suite *contract_suite(void)
{
	Suite *s = suite_create("contract");
	TCase *tc = tcase_create("contract");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_identity_parts_of_1_and_256_bytes_are_accepted);
	tcase_add_test(tc, test_empty_or_257_byte_part_is_invalid_and_reserves_nothing);
	tcase_add_test(tc, test_identities_differing_in_one_part_are_independent);
	tcase_add_test(tc, test_identity_parts_do_not_slide_into_each_other);
	tcase_add_test(tc, test_key_order_and_integer_width_are_the_same_call);
	tcase_add_test(tc, test_different_args_tool_or_meta_is_a_conflict);
	tcase_add_test(tc, test_fingerprint_parts_do_not_slide_into_each_other);
	tcase_add_test(tc, test_answers_do_not_depend_on_when_the_fingerprint_is_computed);
	tcase_add_test(tc, test_invalid_msgpack_args_are_refused_and_reserve_nothing);
	tcase_add_test(tc, test_new_identity_is_reserved_with_a_fresh_execution_id);
	tcase_add_test(tc, test_execution_ids_from_threads_never_repeat);
	tcase_add_test(tc, test_completed_call_replays_status_result_and_execution_id);
	tcase_add_test(tc, test_same_call_while_running_is_uncertain);
	tcase_add_test(tc, test_conflict_reports_existing_entry_in_every_state);
	tcase_add_test(tc, test_timeouts_cancellations_and_failures_replay_as_recorded);
	tcase_add_test(tc, test_an_abandoned_call_is_uncertain_until_resolved);
	tcase_add_test(tc, test_release_frees_the_identity_and_only_once);
	tcase_add_test(tc, test_release_churn_gives_room_back_at_once);
	tcase_add_test(tc, test_table_full_of_released_buckets_recovers);
	tcase_add_test(tc, test_codes_have_the_spec_names);
	tcase_add_test(tc, test_errno_codes_have_their_errno_names);
	tcase_add_test(tc, test_null_pointers_are_refused_with_einval);
	tcase_add_test(tc, test_connect_without_carmyd_is_unavailable);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(contract_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
