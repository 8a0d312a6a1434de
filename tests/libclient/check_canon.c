/*
 * check_canon.c - canonical msgpack and call fingerprints.
 *
 * Every variant encoding below is written out by hand as bytes, never
 * produced by msgpack-c's packer: the point is to prove that what other
 * encoders may legally write lands on the same canonical bytes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <msgpack.h>
#include <xxhash.h>

#include "libclient/canon.h"

/* A byte array literal as the (pointer, length) pair most helpers take. */
#define BYTES(...) ((const uint8_t[]){ __VA_ARGS__ }), \
		   sizeof((const uint8_t[]){ __VA_ARGS__ })

static void hex(char *dst, size_t size, const void *p, size_t len)
{
	const uint8_t *b = p;
	size_t n = 0;

	dst[0] = '\0';
	for (size_t i = 0; i < len && n + 4 < size; i++)
		n += (size_t)snprintf(dst + n, size - n, "%02x ", b[i]);
}

/* The canonical encoding of in must be exactly want. */
static void expect_canon(const uint8_t *in, size_t in_len,
			 const uint8_t *want, size_t want_len)
{
	msgpack_sbuffer sb;
	char got_hex[256], in_hex[256];
	int ret;

	msgpack_sbuffer_init(&sb);
	ret = canon_msgpack(in, in_len, &sb);
	hex(in_hex, sizeof(in_hex), in, in_len);
	ck_assert_msg(ret == 0, "canon(%s) returned %d", in_hex, ret);
	hex(got_hex, sizeof(got_hex), sb.data, sb.size);
	ck_assert_msg(sb.size == want_len &&
		      memcmp(sb.data, want, want_len) == 0,
		      "canon(%s) gave %s", in_hex, got_hex);
	msgpack_sbuffer_destroy(&sb);
}

/* in must be refused, and out must come back untouched. */
static void expect_invalid(const uint8_t *in, size_t in_len)
{
	msgpack_sbuffer sb;
	char in_hex[256];
	int ret;

	msgpack_sbuffer_init(&sb);
	msgpack_sbuffer_write(&sb, "keep", 4);
	ret = canon_msgpack(in, in_len, &sb);
	hex(in_hex, sizeof(in_hex), in, in_len);
	ck_assert_msg(ret == CARMY_EINVALID_ARGS,
		      "canon(%s) returned %d, want CARMY_EINVALID_ARGS",
		      in_hex, ret);
	ck_assert_uint_eq(sb.size, 4);
	ck_assert_mem_eq(sb.data, "keep", 4);
	msgpack_sbuffer_destroy(&sb);
}

static struct carmy_call make_call(const char *tool, const void *args,
				   size_t args_len, const void *meta,
				   size_t meta_len)
{
	struct carmy_call c = {
		.tool = tool,
		.tool_len = tool ? strlen(tool) : 0,
		.args = args,
		.args_len = args_len,
		.meta = meta,
		.meta_len = meta_len,
	};

	return c;
}

static void fp(const struct carmy_call *c, uint8_t out[CANON_FP_LEN])
{
	int ret = canon_fingerprint(c, out);

	ck_assert_msg(ret == 0, "canon_fingerprint returned %d", ret);
}

static void expect_fp_equal(const struct carmy_call *a,
			    const struct carmy_call *b)
{
	uint8_t fa[CANON_FP_LEN], fb[CANON_FP_LEN];

	fp(a, fa);
	fp(b, fb);
	ck_assert_mem_eq(fa, fb, CANON_FP_LEN);
}

static void expect_fp_differ(const struct carmy_call *a,
			     const struct carmy_call *b)
{
	uint8_t fa[CANON_FP_LEN], fb[CANON_FP_LEN];

	fp(a, fa);
	fp(b, fb);
	ck_assert_mem_ne(fa, fb, CANON_FP_LEN);
}

/* ---------------------------------------------------------------- canon */

START_TEST(test_map_key_order_does_not_matter)
{
	/* {"a": 1, "b": 2} and {"b": 2, "a": 1} */
	const uint8_t ab[] = { 0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02 };
	const uint8_t ba[] = { 0x82, 0xa1, 'b', 0x02, 0xa1, 'a', 0x01 };
	struct carmy_call x = make_call("t", ab, sizeof(ab), NULL, 0);
	struct carmy_call y = make_call("t", ba, sizeof(ba), NULL, 0);

	expect_canon(ab, sizeof(ab), ab, sizeof(ab));
	expect_canon(ba, sizeof(ba), ab, sizeof(ab));
	expect_fp_equal(&x, &y);

	/* Keys of mixed types sort by their canonical bytes: 1 (0x01)
	 * before "a" (0xa1 0x61) before "b" (0xa1 0x62), and a key written
	 * wide (uint16 1) sorts where its canonical form does. */
	expect_canon(BYTES(0x83, 0xa1, 'b', 0xc0, 0xcd, 0x00, 0x01, 0xc2,
			   0xa1, 'a', 0xc3),
		     BYTES(0x83, 0x01, 0xc2, 0xa1, 'a', 0xc3, 0xa1, 'b',
			   0xc0));
}
END_TEST

START_TEST(test_array_order_matters)
{
	const uint8_t a[] = { 0x92, 0x01, 0x02 };
	const uint8_t b[] = { 0x92, 0x02, 0x01 };
	struct carmy_call x = make_call("t", a, sizeof(a), NULL, 0);
	struct carmy_call y = make_call("t", b, sizeof(b), NULL, 0);

	expect_canon(b, sizeof(b), b, sizeof(b));
	expect_fp_differ(&x, &y);
}
END_TEST

START_TEST(test_integer_width_does_not_matter)
{
	/* 5 in every family and width */
	expect_canon(BYTES(0x05), BYTES(0x05));
	expect_canon(BYTES(0xcc, 0x05), BYTES(0x05));
	expect_canon(BYTES(0xcd, 0x00, 0x05), BYTES(0x05));
	expect_canon(BYTES(0xce, 0x00, 0x00, 0x00, 0x05), BYTES(0x05));
	expect_canon(BYTES(0xcf, 0, 0, 0, 0, 0, 0, 0, 0x05), BYTES(0x05));
	expect_canon(BYTES(0xd0, 0x05), BYTES(0x05));
	expect_canon(BYTES(0xd1, 0x00, 0x05), BYTES(0x05));
	expect_canon(BYTES(0xd2, 0x00, 0x00, 0x00, 0x05), BYTES(0x05));
	expect_canon(BYTES(0xd3, 0, 0, 0, 0, 0, 0, 0, 0x05), BYTES(0x05));

	/* 200 needs a uint8, even when written as a signed int16 */
	expect_canon(BYTES(0xd1, 0x00, 0xc8), BYTES(0xcc, 0xc8));
	expect_canon(BYTES(0xcf, 0, 0, 0, 0, 0, 0, 0, 0xc8),
		     BYTES(0xcc, 0xc8));
	/* 65536 needs a uint32 */
	expect_canon(BYTES(0xd3, 0, 0, 0, 0, 0, 0x01, 0, 0),
		     BYTES(0xce, 0x00, 0x01, 0x00, 0x00));

	/* negatives stay signed, in the smallest width */
	expect_canon(BYTES(0xd0, 0xff), BYTES(0xff));
	expect_canon(BYTES(0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
			   0xff), BYTES(0xff));
	expect_canon(BYTES(0xd2, 0xff, 0xff, 0xff, 0xe0), BYTES(0xe0));
	expect_canon(BYTES(0xd1, 0xff, 0xdf), BYTES(0xd0, 0xdf));
	expect_canon(BYTES(0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
			   0x38), BYTES(0xd1, 0xff, 0x38));

	/* the extremes survive unchanged */
	expect_canon(BYTES(0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
			   0xff),
		     BYTES(0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
			   0xff));
	expect_canon(BYTES(0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0),
		     BYTES(0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0));

	/* and inside args, the fingerprint follows: {"n": int8 5} */
	{
		const uint8_t narrow[] = { 0x81, 0xa1, 'n', 0x05 };
		const uint8_t wide[] = { 0x81, 0xa1, 'n', 0xd0, 0x05 };
		struct carmy_call x = make_call("t", narrow, sizeof(narrow),
						NULL, 0);
		struct carmy_call y = make_call("t", wide, sizeof(wide),
						NULL, 0);

		expect_fp_equal(&x, &y);
	}
}
END_TEST

START_TEST(test_float32_widened_to_float64)
{
	/* 1.5f and 1.5 */
	expect_canon(BYTES(0xca, 0x3f, 0xc0, 0x00, 0x00),
		     BYTES(0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0));
	expect_canon(BYTES(0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0),
		     BYTES(0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0));
	/* a float is not an integer: 1.0 stays a float */
	expect_canon(BYTES(0xca, 0x3f, 0x80, 0x00, 0x00),
		     BYTES(0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0));
	/* NaNs keep sign, payload and quiet bit (a hardware conversion
	 * quiets a signalling NaN, and two calls would merge) */
	expect_canon(BYTES(0xca, 0x7f, 0x80, 0x00, 0x01),
		     BYTES(0xcb, 0x7f, 0xf0, 0x00, 0x00, 0x20, 0, 0, 0));
	expect_canon(BYTES(0xca, 0x7f, 0xc0, 0x00, 0x01),
		     BYTES(0xcb, 0x7f, 0xf8, 0x00, 0x00, 0x20, 0, 0, 0));
	expect_canon(BYTES(0xca, 0xff, 0xc0, 0x00, 0x00),
		     BYTES(0xcb, 0xff, 0xf8, 0, 0, 0, 0, 0, 0));
	/* infinity is not a NaN */
	expect_canon(BYTES(0xca, 0x7f, 0x80, 0x00, 0x00),
		     BYTES(0xcb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0));
}
END_TEST

START_TEST(test_headers_take_smallest_width)
{
	/* "abc" as str8, str16, str32 */
	expect_canon(BYTES(0xd9, 0x03, 'a', 'b', 'c'),
		     BYTES(0xa3, 'a', 'b', 'c'));
	expect_canon(BYTES(0xda, 0x00, 0x03, 'a', 'b', 'c'),
		     BYTES(0xa3, 'a', 'b', 'c'));
	expect_canon(BYTES(0xdb, 0x00, 0x00, 0x00, 0x03, 'a', 'b', 'c'),
		     BYTES(0xa3, 'a', 'b', 'c'));
	expect_canon(BYTES(0xd9, 0x00), BYTES(0xa0));
	/* bin 2 bytes as bin32 */
	expect_canon(BYTES(0xc6, 0x00, 0x00, 0x00, 0x02, 0xde, 0xad),
		     BYTES(0xc4, 0x02, 0xde, 0xad));
	/* ext type 7, 4 bytes, as ext8 and ext32: fixext4 */
	expect_canon(BYTES(0xc7, 0x04, 0x07, 1, 2, 3, 4),
		     BYTES(0xd6, 0x07, 1, 2, 3, 4));
	expect_canon(BYTES(0xc9, 0x00, 0x00, 0x00, 0x04, 0x07, 1, 2, 3, 4),
		     BYTES(0xd6, 0x07, 1, 2, 3, 4));
	/* ext 3 bytes has no fixext: ext8; negative ext types survive */
	expect_canon(BYTES(0xc8, 0x00, 0x03, 0xfe, 1, 2, 3),
		     BYTES(0xc7, 0x03, 0xfe, 1, 2, 3));
	/* array16 and map32 of one element */
	expect_canon(BYTES(0xdc, 0x00, 0x01, 0xc0), BYTES(0x91, 0xc0));
	expect_canon(BYTES(0xdf, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02),
		     BYTES(0x81, 0x01, 0x02));
	expect_canon(BYTES(0xde, 0x00, 0x00), BYTES(0x80));
}
END_TEST

START_TEST(test_nested_maps_canonical)
{
	/* {"x": {"b": 1, "a": [{"d": 1, "c": 2}]}, "a": 0}, written with
	 * wide headers and integers, and the same in canonical order. */
	const uint8_t messy[] = {
		0xde, 0x00, 0x02,
		  0xa1, 'x',
		  0xdf, 0x00, 0x00, 0x00, 0x02,
		    0xd9, 0x01, 'b', 0xcd, 0x00, 0x01,
		    0xa1, 'a',
		    0xdc, 0x00, 0x01,
		      0x82, 0xa1, 'd', 0xd0, 0x01, 0xa1, 'c', 0xcc, 0x02,
		  0xa1, 'a', 0xd3, 0, 0, 0, 0, 0, 0, 0, 0,
	};
	const uint8_t canonical[] = {
		0x82,
		  0xa1, 'a', 0x00,
		  0xa1, 'x',
		  0x82,
		    0xa1, 'a',
		    0x91,
		      0x82, 0xa1, 'c', 0x02, 0xa1, 'd', 0x01,
		    0xa1, 'b', 0x01,
	};
	struct carmy_call x = make_call("t", messy, sizeof(messy), NULL, 0);
	struct carmy_call y = make_call("t", canonical, sizeof(canonical),
					NULL, 0);

	expect_canon(messy, sizeof(messy), canonical, sizeof(canonical));
	expect_canon(canonical, sizeof(canonical), canonical,
		     sizeof(canonical));
	expect_fp_equal(&x, &y);

	/* a map used as a key is canonicalised before it is compared:
	 * {{"b":1,"a":2}: 1, {"a":2,"b":1}: 2} has one key twice */
	expect_invalid(BYTES(0x82,
			     0x82, 0xa1, 'b', 0x01, 0xa1, 'a', 0x02, 0x01,
			     0x82, 0xa1, 'a', 0x02, 0xa1, 'b', 0x01, 0x02));
}
END_TEST

/* A map bigger than the inline sort's: sorted the same whatever the
 * order keys came in, and a key twice is still found. */
START_TEST(test_big_maps_sort_and_find_duplicates)
{
	enum { N = 5000 };
	msgpack_sbuffer fwd, rev, cf, cr;
	msgpack_packer pf, pr;

	msgpack_sbuffer_init(&fwd);
	msgpack_sbuffer_init(&rev);
	msgpack_packer_init(&pf, &fwd, msgpack_sbuffer_write);
	msgpack_packer_init(&pr, &rev, msgpack_sbuffer_write);
	msgpack_pack_map(&pf, N);
	msgpack_pack_map(&pr, N);
	for (int i = 0; i < N; i++) {
		msgpack_pack_int(&pf, i);
		msgpack_pack_int(&pf, -i);
		msgpack_pack_int(&pr, N - 1 - i);
		msgpack_pack_int(&pr, -(N - 1 - i));
	}
	msgpack_sbuffer_init(&cf);
	msgpack_sbuffer_init(&cr);
	ck_assert_int_eq(canon_msgpack(fwd.data, fwd.size, &cf), 0);
	ck_assert_int_eq(canon_msgpack(rev.data, rev.size, &cr), 0);
	ck_assert_uint_eq(cf.size, cr.size);
	ck_assert_mem_eq(cf.data, cr.data, cf.size);
	/* The reversed map with its first key (4999) repeated last. */
	msgpack_sbuffer_clear(&rev);
	msgpack_pack_map(&pr, N + 1);
	for (int i = 0; i < N; i++) {
		msgpack_pack_int(&pr, N - 1 - i);
		msgpack_pack_nil(&pr);
	}
	msgpack_pack_int(&pr, N - 1);
	msgpack_pack_nil(&pr);
	msgpack_sbuffer_clear(&cr);
	ck_assert_int_eq(canon_msgpack(rev.data, rev.size, &cr),
			 CARMY_EINVALID_ARGS);
	msgpack_sbuffer_destroy(&fwd);
	msgpack_sbuffer_destroy(&rev);
	msgpack_sbuffer_destroy(&cf);
	msgpack_sbuffer_destroy(&cr);
}
END_TEST

START_TEST(test_duplicate_keys_rejected)
{
	const uint8_t dup[] = { 0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02 };
	struct carmy_call c = make_call("t", dup, sizeof(dup), NULL, 0);
	uint8_t out[CANON_FP_LEN];

	expect_invalid(dup, sizeof(dup));
	/* equal only once canonical: 5 and int8 5; "a" and str8 "a" */
	expect_invalid(BYTES(0x82, 0x05, 0xc0, 0xd0, 0x05, 0xc0));
	expect_invalid(BYTES(0x82, 0xa1, 'a', 0xc0, 0xd9, 0x01, 'a', 0xc0));
	/* deep inside an array */
	expect_invalid(BYTES(0x92, 0x80,
			     0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x01));

	ck_assert_int_eq(canon_fingerprint(&c, out), CARMY_EINVALID_ARGS);
	c = make_call("t", NULL, 0, dup, sizeof(dup));
	ck_assert_int_eq(canon_fingerprint(&c, out), CARMY_EINVALID_ARGS);
}
END_TEST

START_TEST(test_trailing_bytes_rejected)
{
	const uint8_t two[] = { 0x05, 0x05 };
	struct carmy_call c = make_call("t", two, sizeof(two), NULL, 0);
	uint8_t out[CANON_FP_LEN];

	expect_invalid(two, sizeof(two));
	expect_invalid(BYTES(0x80, 0x00));
	expect_invalid(BYTES(0x91, 0x01, 0x01));
	expect_invalid(BYTES(0xa1, 'a', 'b'));
	ck_assert_int_eq(canon_fingerprint(&c, out), CARMY_EINVALID_ARGS);
}
END_TEST

START_TEST(test_truncated_rejected)
{
	const uint8_t one = 0x05;
	struct carmy_call c = make_call("t", &one, 0, NULL, 0);
	uint8_t out[CANON_FP_LEN];

	expect_invalid(&one, 0);			/* nothing at all */
	expect_invalid(BYTES(0xa3, 'a', 'b'));		/* str short */
	expect_invalid(BYTES(0x92, 0x01));		/* array short */
	expect_invalid(BYTES(0x81, 0xa1, 'a'));		/* no value */
	expect_invalid(BYTES(0xcd, 0x00));		/* uint16 short */
	expect_invalid(BYTES(0xcb, 0, 0, 0));		/* float64 short */
	expect_invalid(BYTES(0xd9));			/* no length */
	expect_invalid(BYTES(0xda, 0x00));		/* half a length */
	expect_invalid(BYTES(0xc7, 0x01));		/* ext without type */
	expect_invalid(BYTES(0xd6, 0x07, 1, 2, 3));	/* fixext4 short */
	expect_invalid(BYTES(0xc6, 0xff, 0xff, 0xff, 0xff, 0x00));
	expect_invalid(BYTES(0xdc, 0x00, 0x05, 0x01, 0x01));

	/* non-NULL args of length 0 are not "absent": they are no object */
	ck_assert_int_eq(canon_fingerprint(&c, out), CARMY_EINVALID_ARGS);
	c = make_call("t", NULL, 0, &one, 0);
	ck_assert_int_eq(canon_fingerprint(&c, out), CARMY_EINVALID_ARGS);
}
END_TEST

/*
 * Run every hostile header in a child whose address space may grow by only
 * 256 MiB beyond what it already maps (so this works under ASan and
 * valgrind too, which map a lot up front). msgpack-c on its own would
 * reserve gigabytes for these and fail with -ENOMEM or die; refusing them
 * up front returns CARMY_EINVALID_ARGS.
 */
static int hostile_in_small_address_space(const uint8_t *const *in,
					  const size_t *len, size_t n)
{
	unsigned long pages = 0;
	struct rlimit rl;
	FILE *f;
	pid_t pid;
	int status;

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		f = fopen("/proc/self/statm", "r");
		if (!f || fscanf(f, "%lu", &pages) != 1)
			_exit(2);
		fclose(f);
		rl.rlim_cur = rl.rlim_max =
			pages * (rlim_t)sysconf(_SC_PAGESIZE) + (256u << 20);
		if (setrlimit(RLIMIT_AS, &rl))
			_exit(3);
		for (size_t i = 0; i < n; i++) {
			msgpack_sbuffer sb;
			int ret;

			msgpack_sbuffer_init(&sb);
			ret = canon_msgpack(in[i], len[i], &sb);
			msgpack_sbuffer_destroy(&sb);
			if (ret != CARMY_EINVALID_ARGS)
				_exit(10 + (int)i);
		}
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

START_TEST(test_hostile_array32_header_rejected)
{
	static const uint8_t a32[] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t m32[] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t a32t[] = { 0xdd, 0xff, 0xff, 0xff, 0xff, 0x00 };
	static const uint8_t m32t[] = { 0xdf, 0xff, 0xff, 0xff, 0xff, 0x00 };
	static const uint8_t a16t[] = { 0xdc, 0xff, 0xff, 0x00 };
	static const uint8_t m16t[] = { 0xde, 0xff, 0xff, 0x00 };
	/* a map of 3 entries needs 6 bytes; 5 are left */
	static const uint8_t m3[] = { 0x83, 0x01, 0x01, 0x01, 0x01, 0x01 };
	/* nested: each header alone fits, together they do not */
	static const uint8_t nest[] = { 0x92, 0xdd, 0x00, 0x00, 0x00, 0x02,
					0x01, 0x01 };
	static const uint8_t big_str[] = { 0xdb, 0xff, 0xff, 0xff, 0xff, 0x00 };
	static const uint8_t big_ext[] = { 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01,
					   0x00 };
	const uint8_t *const in[] = { a32, m32, a32t, m32t, a16t, m16t, m3,
				      nest, big_str, big_ext };
	const size_t len[] = { sizeof(a32), sizeof(m32), sizeof(a32t),
			       sizeof(m32t), sizeof(a16t), sizeof(m16t),
			       sizeof(m3), sizeof(nest), sizeof(big_str),
			       sizeof(big_ext) };
	const size_t n = sizeof(in) / sizeof(in[0]);
	int status;

	for (size_t i = 0; i < n; i++)
		expect_invalid(in[i], len[i]);

	status = hostile_in_small_address_space(in, len, n);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child status %#x (exit code 10+i names input i)",
		      status);
}
END_TEST

START_TEST(test_deep_nesting_rejected)
{
	uint8_t buf[2 * CANON_MAX_DEPTH + 4];
	size_t n;
	uint8_t *deep;
	const size_t huge = 1u << 20;

	/* 33 nested fixarrays, innermost empty */
	for (n = 0; n < CANON_MAX_DEPTH; n++)
		buf[n] = 0x91;
	buf[n++] = 0x90;
	expect_invalid(buf, n);

	/* 33 nested, innermost holding a value */
	buf[n - 1] = 0x91;
	buf[n++] = 0x01;
	expect_invalid(buf, n);

	/* 33 nested fixmaps {0: {0: ... {}}} */
	for (n = 0; n < 2 * CANON_MAX_DEPTH; n += 2) {
		buf[n] = 0x81;
		buf[n + 1] = 0x00;
	}
	buf[n++] = 0x80;
	expect_invalid(buf, n);

	/* 32 is the limit, and stays as it is */
	for (n = 0; n < CANON_MAX_DEPTH - 1; n++)
		buf[n] = 0x91;
	buf[n++] = 0x90;
	expect_canon(buf, n, buf, n);

	/* a megabyte of array headers must not exhaust any stack */
	deep = malloc(huge);
	ck_assert_ptr_nonnull(deep);
	memset(deep, 0x91, huge);
	expect_invalid(deep, huge);
	free(deep);
}
END_TEST

START_TEST(test_0xc1_rejected)
{
	expect_invalid(BYTES(0xc1));
	expect_invalid(BYTES(0x91, 0xc1));
	expect_invalid(BYTES(0x81, 0xc1, 0x01));
	expect_invalid(BYTES(0x81, 0x01, 0xc1));
	expect_invalid(BYTES(0x92, 0x01, 0xc1));
}
END_TEST

START_TEST(test_canonical_form_is_a_fixed_point)
{
	const uint8_t messy[] = {
		0x83, 0xd9, 0x01, 'z', 0xca, 0x3f, 0xc0, 0x00, 0x00,
		0xcc, 0x07, 0xdc, 0x00, 0x02, 0xd0, 0xfe, 0xc4, 0x00,
		0xa1, 'm', 0x81, 0xa1, 'q', 0xc3,
	};
	msgpack_sbuffer once, twice;

	msgpack_sbuffer_init(&once);
	msgpack_sbuffer_init(&twice);
	ck_assert_int_eq(canon_msgpack(messy, sizeof(messy), &once), 0);
	ck_assert_int_eq(canon_msgpack(once.data, once.size, &twice), 0);
	ck_assert_uint_eq(once.size, twice.size);
	ck_assert_mem_eq(once.data, twice.data, once.size);
	msgpack_sbuffer_destroy(&once);
	msgpack_sbuffer_destroy(&twice);
}
END_TEST

START_TEST(test_canon_appends_to_out)
{
	msgpack_sbuffer sb;

	msgpack_sbuffer_init(&sb);
	msgpack_sbuffer_write(&sb, "ab", 2);
	ck_assert_int_eq(canon_msgpack(BYTES(0xd0, 0x05), &sb), 0);
	ck_assert_uint_eq(sb.size, 3);
	ck_assert_mem_eq(sb.data, "ab\x05", 3);
	/* a failure deep in a map takes back what was already written */
	ck_assert_int_eq(canon_msgpack(BYTES(0x91, 0x82, 0x01, 0x01, 0x01,
					     0x01), &sb),
			 CARMY_EINVALID_ARGS);
	ck_assert_uint_eq(sb.size, 3);
	msgpack_sbuffer_destroy(&sb);

	ck_assert_int_eq(canon_msgpack(BYTES(0x01), NULL), -EINVAL);
}
END_TEST

/* ---------------------------------------------------------- fingerprint */

START_TEST(test_different_args_differ)
{
	const uint8_t a1[] = { 0x81, 0xa1, 'a', 0x01 };
	const uint8_t a2[] = { 0x81, 0xa1, 'a', 0x02 };
	const uint8_t b1[] = { 0x81, 0xa1, 'b', 0x01 };
	struct carmy_call x = make_call("t", a1, sizeof(a1), NULL, 0);
	struct carmy_call y;

	y = make_call("t", a2, sizeof(a2), NULL, 0);
	expect_fp_differ(&x, &y);
	y = make_call("t", b1, sizeof(b1), NULL, 0);
	expect_fp_differ(&x, &y);
	y = make_call("u", a1, sizeof(a1), NULL, 0);
	expect_fp_differ(&x, &y);
	y = make_call("t", a1, sizeof(a1), a1, sizeof(a1));
	expect_fp_differ(&x, &y);
	/* meta counts too, and is canonical as well */
	x = make_call("t", a1, sizeof(a1), a1, sizeof(a1));
	y = make_call("t", a1, sizeof(a1), a2, sizeof(a2));
	expect_fp_differ(&x, &y);
	y = make_call("t", a1, sizeof(a1), BYTES(0x81, 0xa1, 'a', 0xd0, 0x01));
	expect_fp_equal(&x, &y);
}
END_TEST

START_TEST(test_parts_cannot_slide)
{
	/* Concatenated without lengths, each pair would hash the same
	 * bytes: "a" + 'b' (fixint 0x62) vs "ab" + nothing; args 1 vs
	 * meta 1; "a\x01" vs "a" + fixint 1. */
	const uint8_t b = 'b', one = 0x01;
	struct carmy_call x, y;

	x = make_call("a", &b, 1, NULL, 0);
	y = make_call("ab", NULL, 0, NULL, 0);
	expect_fp_differ(&x, &y);

	x = make_call("t", &one, 1, NULL, 0);
	y = make_call("t", NULL, 0, &one, 1);
	expect_fp_differ(&x, &y);

	x = make_call("a\x01", NULL, 0, NULL, 0);
	y = make_call("a", &one, 1, NULL, 0);
	expect_fp_differ(&x, &y);

	x = make_call("", &b, 1, NULL, 0);
	y = make_call("b", NULL, 0, NULL, 0);
	expect_fp_differ(&x, &y);
}
END_TEST

START_TEST(test_absent_vs_empty_map_differ)
{
	const uint8_t empty = 0x80;
	struct carmy_call x, y;

	x = make_call("t", NULL, 0, NULL, 0);
	y = make_call("t", &empty, 1, NULL, 0);
	expect_fp_differ(&x, &y);
	y = make_call("t", NULL, 0, &empty, 1);
	expect_fp_differ(&x, &y);
	/* an empty map written as map16 is still the empty map */
	x = make_call("t", &empty, 1, NULL, 0);
	y = make_call("t", BYTES(0xde, 0x00, 0x00), NULL, 0);
	expect_fp_equal(&x, &y);
}
END_TEST

START_TEST(test_fingerprint_deterministic)
{
	const uint8_t args[] = { 0x82, 0xa1, 'b', 0x02, 0xa1, 'a', 0x01 };
	const uint8_t meta[] = { 0x91, 0xc3 };
	struct carmy_call c = make_call("tool", args, sizeof(args),
					meta, sizeof(meta));
	uint8_t a[CANON_FP_LEN], b[CANON_FP_LEN], copy[sizeof(args)];
	/* The documented preimage, built by hand: domain, then each part
	 * as an 8-byte big-endian length and its canonical bytes. */
	const uint8_t preimage[] = {
		'c', 'a', 'r', 'm', 'y', '-', 'f', 'p', '-', '1',
		0, 0, 0, 0, 0, 0, 0, 4, 't', 'o', 'o', 'l',
		0, 0, 0, 0, 0, 0, 0, 7,
		0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02,
		0, 0, 0, 0, 0, 0, 0, 2, 0x91, 0xc3,
	};
	XXH128_canonical_t want;

	fp(&c, a);
	fp(&c, b);
	ck_assert_mem_eq(a, b, CANON_FP_LEN);

	/* the bytes matter, not where they live */
	memcpy(copy, args, sizeof(args));
	c.args = copy;
	fp(&c, b);
	ck_assert_mem_eq(a, b, CANON_FP_LEN);

	XXH128_canonicalFromHash(&want,
				 XXH3_128bits(preimage, sizeof(preimage)));
	ck_assert_mem_eq(a, want.digest, CANON_FP_LEN);

	/* identity parts are not part of the fingerprint */
	c.principal = "p";
	c.principal_len = 1;
	fp(&c, b);
	ck_assert_mem_eq(a, b, CANON_FP_LEN);
}
END_TEST

START_TEST(test_fingerprint_argument_checks)
{
	struct carmy_call c = make_call("", NULL, 0, NULL, 0);
	uint8_t out[CANON_FP_LEN];

	/* an empty tool with nothing else is a valid call */
	fp(&c, out);
	c.tool = NULL;
	fp(&c, out);

	c.tool_len = 3;
	ck_assert_int_eq(canon_fingerprint(&c, out), CARMY_EINVALID_ARGS);
	c = make_call("t", NULL, 4, NULL, 0);
	ck_assert_int_eq(canon_fingerprint(&c, out), CARMY_EINVALID_ARGS);
	c = make_call("t", NULL, 0, NULL, 4);
	ck_assert_int_eq(canon_fingerprint(&c, out), CARMY_EINVALID_ARGS);
	c = make_call("t", NULL, 0, BYTES(0xc1));
	ck_assert_int_eq(canon_fingerprint(&c, out), CARMY_EINVALID_ARGS);

	ck_assert_int_eq(canon_fingerprint(NULL, out), -EINVAL);
	ck_assert_int_eq(canon_fingerprint(&c, NULL), -EINVAL);
}
END_TEST

/* ------------------------------------------------ fast path agrees */

/* Append a random object in a random (valid, often non-minimal) encoding. */
static void rnd_put(uint8_t *buf, size_t *n, size_t cap, unsigned *seed,
		    int depth)
{
	int kind = rand_r(seed) % (depth > 3 ? 6 : 8);
	uint64_t v = (uint64_t)rand_r(seed) % 70000;

	if (*n + 32 > cap) {
		buf[(*n)++] = 0xc0;
		return;
	}
	switch (kind) {
	case 0:		/* unsigned in any width that holds it */
		if (v < 128 && rand_r(seed) % 2) {
			buf[(*n)++] = (uint8_t)v;
		} else if (v < 256 && rand_r(seed) % 2) {
			buf[(*n)++] = 0xcc;
			buf[(*n)++] = (uint8_t)v;
		} else {
			buf[(*n)++] = 0xce;
			for (int i = 3; i >= 0; i--)
				buf[(*n)++] = (uint8_t)(v >> (8 * i));
		}
		break;
	case 1: {	/* signed, maybe positive, in int16 or int32 */
		int32_t sv = (int32_t)v - 35000;

		buf[(*n)++] = 0xd2;
		for (int i = 3; i >= 0; i--)
			buf[(*n)++] = (uint8_t)((uint32_t)sv >> (8 * i));
		break;
	}
	case 2:		/* short string, fixstr or str8 */
		v %= 6;
		if (rand_r(seed) % 2) {
			buf[(*n)++] = (uint8_t)(0xa0 | v);
		} else {
			buf[(*n)++] = 0xd9;
			buf[(*n)++] = (uint8_t)v;
		}
		for (uint64_t i = 0; i < v; i++)
			buf[(*n)++] = (uint8_t)('a' + rand_r(seed) % 3);
		break;
	case 3:
		buf[(*n)++] = (uint8_t)(0xc2 + rand_r(seed) % 2);
		break;
	case 4:		/* float32 or float64 */
		if (rand_r(seed) % 2) {
			buf[(*n)++] = 0xca;
			memcpy(buf + *n, "\x3f\x80\x00\x00", 4);
			*n += 4;
		} else {
			buf[(*n)++] = 0xcb;
			memcpy(buf + *n, "\x3f\xf0\x00\x00\x00\x00\x00\x00", 8);
			*n += 8;
		}
		break;
	case 5:		/* bin8 or bin16 */
		v %= 4;
		buf[(*n)++] = rand_r(seed) % 2 ? 0xc4 : 0xc5;
		if (buf[*n - 1] == 0xc5)
			buf[(*n)++] = 0;
		buf[(*n)++] = (uint8_t)v;
		for (uint64_t i = 0; i < v; i++)
			buf[(*n)++] = (uint8_t)rand_r(seed);
		break;
	case 6: {	/* array, fix or array16 */
		int c = rand_r(seed) % 4;

		if (rand_r(seed) % 3) {
			buf[(*n)++] = (uint8_t)(0x90 | c);
		} else {
			buf[(*n)++] = 0xdc;
			buf[(*n)++] = 0;
			buf[(*n)++] = (uint8_t)c;
		}
		for (int i = 0; i < c; i++)
			rnd_put(buf, n, cap, seed, depth + 1);
		break;
	}
	default: {	/* map, fix or map16, keys in random order */
		int c = rand_r(seed) % 4;

		if (rand_r(seed) % 3) {
			buf[(*n)++] = (uint8_t)(0x80 | c);
		} else {
			buf[(*n)++] = 0xde;
			buf[(*n)++] = 0;
			buf[(*n)++] = (uint8_t)c;
		}
		for (int i = 0; i < 2 * c; i++)
			rnd_put(buf, n, cap, seed, depth + 1);
		break;
	}
	}
}

/* ------------------------------------------------ reference encoder */

struct ref_kv {
	const char *key;
	size_t off;
	size_t key_len;
	size_t len;
};

static int ref_put(msgpack_packer *pk, const msgpack_object *o);
static int ref_put_map(msgpack_packer *pk, const msgpack_object_map *m);
static int ref_kv_cmp(const void *a, const void *b);

/* The reference: canonical form through msgpack-c's object tree and
 * packer, the straightforward way. The fast re-encoder in canon.c must
 * agree with it byte for byte. */
static int ref_put(msgpack_packer *pk, const msgpack_object *o)
{
	int r;

	switch (o->type) {
	case MSGPACK_OBJECT_NIL:
		r = msgpack_pack_nil(pk);
		break;
	case MSGPACK_OBJECT_BOOLEAN:
		r = o->via.boolean ? msgpack_pack_true(pk) :
				     msgpack_pack_false(pk);
		break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		/* msgpack-c reports every non-negative value here, whatever
		 * family it was written in, so int8 5 and uint16 5 meet. */
		r = msgpack_pack_uint64(pk, o->via.u64);
		break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		r = msgpack_pack_int64(pk, o->via.i64);
		break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		/* msgpack-c already widened a float32 into via.f64. */
		r = msgpack_pack_double(pk, o->via.f64);
		break;
	case MSGPACK_OBJECT_STR:
		r = msgpack_pack_str(pk, o->via.str.size);
		if (!r)
			r = msgpack_pack_str_body(pk, o->via.str.ptr,
						  o->via.str.size);
		break;
	case MSGPACK_OBJECT_BIN:
		r = msgpack_pack_bin(pk, o->via.bin.size);
		if (!r)
			r = msgpack_pack_bin_body(pk, o->via.bin.ptr,
						  o->via.bin.size);
		break;
	case MSGPACK_OBJECT_EXT:
		r = msgpack_pack_ext(pk, o->via.ext.size, o->via.ext.type);
		if (!r)
			r = msgpack_pack_ext_body(pk, o->via.ext.ptr,
						  o->via.ext.size);
		break;
	case MSGPACK_OBJECT_ARRAY:
		r = msgpack_pack_array(pk, o->via.array.size);
		for (uint32_t i = 0; !r && i < o->via.array.size; i++) {
			int ret = ref_put(pk, &o->via.array.ptr[i]);

			if (ret)
				return ret;
		}
		break;
	case MSGPACK_OBJECT_MAP:
		return ref_put_map(pk, &o->via.map);
	default:
		return CARMY_EINVALID_ARGS;
	}
	return r ? -ENOMEM : 0;
}

/*
 * Keys must be compared in canonical form, which is only known after
 * encoding them, so every entry is encoded into a scratch buffer first,
 * then the entries are sorted and copied out. Each byte is copied once per
 * enclosing map, at most CANON_MAX_DEPTH times.
 */
static int ref_put_map(msgpack_packer *pk, const msgpack_object_map *m)
{
	msgpack_sbuffer scratch;
	msgpack_packer spk;
	struct ref_kv *kv;
	int ret;

	if (msgpack_pack_map(pk, m->size))
		return -ENOMEM;
	if (m->size == 0)
		return 0;

	/* m->size is at most half the input length (wire_scan). */
	kv = calloc(m->size, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	msgpack_sbuffer_init(&scratch);
	msgpack_packer_init(&spk, &scratch, msgpack_sbuffer_write);

	for (uint32_t i = 0; i < m->size; i++) {
		kv[i].off = scratch.size;
		ret = ref_put(&spk, &m->ptr[i].key);
		if (ret)
			goto out;
		kv[i].key_len = scratch.size - kv[i].off;
		ret = ref_put(&spk, &m->ptr[i].val);
		if (ret)
			goto out;
		kv[i].len = scratch.size - kv[i].off;
	}
	for (uint32_t i = 0; i < m->size; i++)
		kv[i].key = scratch.data + kv[i].off;

	qsort(kv, m->size, sizeof(*kv), ref_kv_cmp);

	/* Sorted, equal keys are neighbours. Letting one win would make
	 * the fingerprint depend on which the decoder kept. */
	for (uint32_t i = 1; i < m->size; i++) {
		if (ref_kv_cmp(&kv[i - 1], &kv[i]) == 0) {
			ret = CARMY_EINVALID_ARGS;
			goto out;
		}
	}

	ret = 0;
	for (uint32_t i = 0; i < m->size; i++) {
		if (pk->callback(pk->data, kv[i].key, kv[i].len)) {
			ret = -ENOMEM;
			break;
		}
	}
out:
	msgpack_sbuffer_destroy(&scratch);
	free(kv);
	return ret;
}

/* Bytewise, then shorter first. Canonical encodings are prefix-free, so
 * the length rule only settles ties between equal keys; it is kept so the
 * order is a total one whatever the bytes are. */
static int ref_kv_cmp(const void *a, const void *b)
{
	const struct ref_kv *x = a, *y = b;
	size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
	int c = memcmp(x->key, y->key, n);

	if (c)
		return c;
	return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}


static int ref_canon(const void *buf, size_t len, msgpack_sbuffer *out)
{
	msgpack_unpacked up;
	msgpack_packer pk;
	size_t off = 0;
	int ret = CARMY_EINVALID_ARGS;

	msgpack_unpacked_init(&up);
	if (msgpack_unpack_next(&up, buf, len, &off) == MSGPACK_UNPACK_SUCCESS &&
	    off == len) {
		msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
		ret = ref_put(&pk, &up.data);
	}
	msgpack_unpacked_destroy(&up);
	return ret;
}

START_TEST(test_reencoder_agrees_with_reference)
{
	unsigned seed = 2024;
	int rejected = 0, checked = 0, changed = 0;

	for (int i = 0; i < 30000; i++) {
		uint8_t buf[4096];
		size_t n = 0;
		msgpack_sbuffer got, want;
		int rg, rw;

		rnd_put(buf, &n, sizeof(buf), &seed, 0);
		msgpack_sbuffer_init(&got);
		msgpack_sbuffer_init(&want);
		rg = canon_msgpack(buf, n, &got);
		rw = ref_canon(buf, n, &want);
		ck_assert_int_eq(rg, rw);
		if (rg == 0) {
			ck_assert_uint_eq(got.size, want.size);
			ck_assert_mem_eq(got.data, want.data, got.size);
			changed += got.size != n || memcmp(got.data, buf, n) != 0;
			checked++;
		} else {
			rejected++;	/* duplicate keys */
		}
		msgpack_sbuffer_destroy(&got);
		msgpack_sbuffer_destroy(&want);
	}
	ck_assert_int_gt(checked, 20000);
	ck_assert_int_gt(changed, 1000);
	ck_assert_int_gt(rejected, 0);
}
END_TEST

/*
 * The re-encoder validates as it goes instead of calling wire_scan() first,
 * so it must refuse exactly what wire_scan() refuses. Damage valid objects
 * (truncate, overwrite, insert a byte, append one) and compare: bytes
 * wire_scan() refuses must be refused; bytes it accepts must come out as the
 * reference says (the reference may parse them: wire_scan() vouched).
 */
START_TEST(test_validation_agrees_with_wire_scan)
{
	unsigned seed = 77;
	int refused = 0, accepted = 0;

	for (int i = 0; i < 30000; i++) {
		uint8_t buf[4096];
		size_t n = 0, at;
		msgpack_sbuffer got, want;
		bool valid;
		int rg;

		rnd_put(buf, &n, sizeof(buf) - 1, &seed, 0);
		at = (size_t)rand_r(&seed) % n;
		switch (rand_r(&seed) % 4) {
		case 0:
			n = at;
			break;
		case 1:
			buf[at] = (uint8_t)rand_r(&seed);
			break;
		case 2:
			memmove(buf + at + 1, buf + at, n - at);
			buf[at] = (uint8_t)rand_r(&seed);
			n++;
			break;
		default:
			buf[n++] = (uint8_t)rand_r(&seed);
			break;
		}
		valid = wire_scan(buf, n, n) == (long)n;
		msgpack_sbuffer_init(&got);
		rg = canon_msgpack(buf, n, &got);
		if (!valid) {
			ck_assert_int_eq(rg, CARMY_EINVALID_ARGS);
			ck_assert_uint_eq(got.size, 0);
			refused++;
		} else {
			msgpack_sbuffer_init(&want);
			ck_assert_int_eq(rg, ref_canon(buf, n, &want));
			if (rg == 0) {	/* else duplicate keys, both */
				ck_assert_uint_eq(got.size, want.size);
				ck_assert_mem_eq(got.data, want.data, got.size);
			}
			msgpack_sbuffer_destroy(&want);
			accepted++;
		}
		msgpack_sbuffer_destroy(&got);
	}
	ck_assert_int_gt(refused, 10000);
	ck_assert_int_gt(accepted, 3000);
}
END_TEST

/* The raw print hashes the bytes as given: its documented preimage, the
 * bytes (not their meaning) decide, and parts cannot slide. */
START_TEST(test_raw_print_is_of_the_bytes_as_sent)
{
	const uint8_t args[] = { 0x82, 0xa1, 'b', 0x02, 0xa1, 'a', 0x01 };
	const uint8_t sorted[] = { 0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02 };
	const uint8_t meta[] = { 0x91, 0xc3 };
	const uint8_t preimage[] = {
		'c', 'a', 'r', 'm', 'y', '-', 'r', 'a', 'w', '-', '1',
		0, 0, 0, 0, 0, 0, 0, 4, 't', 'o', 'o', 'l',
		0, 0, 0, 0, 0, 0, 0, 7,
		0x82, 0xa1, 'b', 0x02, 0xa1, 'a', 0x01,
		0, 0, 0, 0, 0, 0, 0, 2, 0x91, 0xc3,
	};
	struct carmy_call c = make_call("tool", args, sizeof(args),
					meta, sizeof(meta));
	uint8_t a[CANON_FP_LEN], b[CANON_FP_LEN], f[CANON_FP_LEN];
	XXH128_canonical_t want;

	ck_assert_int_eq(canon_rawprint(&c, a), 0);
	XXH128_canonicalFromHash(&want,
				 XXH3_128bits(preimage, sizeof(preimage)));
	ck_assert_mem_eq(a, want.digest, CANON_FP_LEN);
	/* never the fingerprint, even for canonical bytes */
	fp(&c, f);
	ck_assert_mem_ne(a, f, CANON_FP_LEN);

	/* the same call in other bytes: same fingerprint, other raw print */
	c.args = sorted;
	ck_assert_int_eq(canon_rawprint(&c, b), 0);
	ck_assert_mem_ne(a, b, CANON_FP_LEN);
	fp(&c, b);
	ck_assert_mem_eq(f, b, CANON_FP_LEN);

	/* "tool" + args == "too" + "l" + args: length-delimited */
	c = make_call("too", args, sizeof(args), meta, sizeof(meta));
	ck_assert_int_eq(canon_rawprint(&c, b), 0);
	ck_assert_mem_ne(a, b, CANON_FP_LEN);
	/* absent meta differs from present meta */
	c = make_call("tool", args, sizeof(args), NULL, 0);
	ck_assert_int_eq(canon_rawprint(&c, b), 0);
	ck_assert_mem_ne(a, b, CANON_FP_LEN);
}
END_TEST

/* What can never be msgpack is refused at once, so it can never match an
 * entry recorded with those parts absent. */
START_TEST(test_raw_print_argument_checks)
{
	const uint8_t one[] = { 0x01 };
	struct carmy_call c;
	uint8_t out[CANON_FP_LEN];

	c = make_call("t", one, 0, NULL, 0);	/* present, empty args */
	ck_assert_int_eq(canon_rawprint(&c, out), CARMY_EINVALID_ARGS);
	c = make_call("t", NULL, 0, one, 0);	/* present, empty meta */
	ck_assert_int_eq(canon_rawprint(&c, out), CARMY_EINVALID_ARGS);
	c = make_call("t", NULL, 1, NULL, 0);	/* NULL with a length */
	ck_assert_int_eq(canon_rawprint(&c, out), CARMY_EINVALID_ARGS);
	c = make_call(NULL, NULL, 0, NULL, 0);
	c.tool_len = 1;
	ck_assert_int_eq(canon_rawprint(&c, out), CARMY_EINVALID_ARGS);
	ck_assert_int_eq(canon_rawprint(NULL, out), -EINVAL);
	ck_assert_int_eq(canon_rawprint(&c, NULL), -EINVAL);
	c = make_call("", NULL, 0, NULL, 0);	/* everything empty is fine */
	ck_assert_int_eq(canon_rawprint(&c, out), 0);
}
END_TEST

static Suite *canon_suite(void)
{
	Suite *s = suite_create("canon");
	TCase *tc = tcase_create("canonical");
	TCase *tf = tcase_create("fingerprint");

	tcase_add_test(tc, test_map_key_order_does_not_matter);
	tcase_add_test(tc, test_array_order_matters);
	tcase_add_test(tc, test_integer_width_does_not_matter);
	tcase_add_test(tc, test_float32_widened_to_float64);
	tcase_add_test(tc, test_headers_take_smallest_width);
	tcase_add_test(tc, test_nested_maps_canonical);
	tcase_add_test(tc, test_big_maps_sort_and_find_duplicates);
	tcase_add_test(tc, test_duplicate_keys_rejected);
	tcase_add_test(tc, test_trailing_bytes_rejected);
	tcase_add_test(tc, test_truncated_rejected);
	tcase_add_test(tc, test_hostile_array32_header_rejected);
	tcase_add_test(tc, test_deep_nesting_rejected);
	tcase_add_test(tc, test_0xc1_rejected);
	tcase_add_test(tc, test_canonical_form_is_a_fixed_point);
	tcase_add_test(tc, test_canon_appends_to_out);
	tcase_add_test(tc, test_reencoder_agrees_with_reference);
	tcase_add_test(tc, test_validation_agrees_with_wire_scan);
	suite_add_tcase(s, tc);

	tcase_add_test(tf, test_different_args_differ);
	tcase_add_test(tf, test_parts_cannot_slide);
	tcase_add_test(tf, test_absent_vs_empty_map_differ);
	tcase_add_test(tf, test_fingerprint_deterministic);
	tcase_add_test(tf, test_fingerprint_argument_checks);
	tcase_add_test(tf, test_raw_print_is_of_the_bytes_as_sent);
	tcase_add_test(tf, test_raw_print_argument_checks);
	suite_add_tcase(s, tf);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(canon_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
