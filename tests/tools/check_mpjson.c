/*
 * check_mpjson.c - a call's arguments as an operator sees them
 * (tools/mpjson.c, and tools/text.c's text_put_json and text_put_clipped):
 * every msgpack type as JSON, a cut object as far as it parses and marked,
 * and what is not msgpack refused with nothing written, whatever the bytes.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "tools/mpjson.h"
#include "tools/text.h"

/* mpjson_put() of len bytes of whole into a string: its return in *rc. */
static char *render(const void *buf, size_t len, uint64_t whole, int *rc)
{
	char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);

	ck_assert_ptr_nonnull(f);
	*rc = mpjson_put(f, buf, len, whole);
	ck_assert_int_eq(fclose(f), 0);
	return text;
}

static void whole_is(const void *buf, size_t len, const char *want)
{
	int rc;
	char *got = render(buf, len, len, &rc);

	ck_assert_int_eq(rc, MPJSON_WHOLE);
	ck_assert_str_eq(got, want);
	free(got);
}

static void prefix_is(const void *buf, size_t len, uint64_t whole,
		      const char *want)
{
	int rc;
	char *got = render(buf, len, whole, &rc);

	ck_assert_int_eq(rc, MPJSON_PREFIX);
	ck_assert_str_eq(got, want);
	free(got);
}

static void is_not(const void *buf, size_t len, uint64_t whole)
{
	int rc;
	char *got = render(buf, len, whole, &rc);

	ck_assert_int_eq(rc, MPJSON_NOT);
	ck_assert_str_eq(got, "");
	free(got);
}

#define B(...) ((const uint8_t[]){ __VA_ARGS__ }), \
	       sizeof((const uint8_t[]){ __VA_ARGS__ })

START_TEST(test_every_type_is_json)
{
	whole_is(B(0xc0), "null");
	whole_is(B(0xc2), "false");
	whole_is(B(0xc3), "true");
	whole_is(B(0x7f), "127");
	whole_is(B(0xe0), "-32");
	whole_is(B(0xcc, 0xff), "255");
	whole_is(B(0xcd, 0x01, 0x00), "256");
	whole_is(B(0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
		 "18446744073709551615");
	whole_is(B(0xd0, 0x80), "-128");
	whole_is(B(0xd1, 0xff, 0xfe), "-2");
	whole_is(B(0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0), "-9223372036854775808");
	whole_is(B(0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0), "1.5");
	whole_is(B(0xca, 0x7f, 0xc0, 0, 0), "\"NaN\"");
	whole_is(B(0xcb, 0xff, 0xf0, 0, 0, 0, 0, 0, 0), "\"-Infinity\"");
	whole_is(B(0xa3, 'a', '"', '\n'), "\"a\\\"\\u000a\"");
	whole_is(B(0xd9, 2, 0xc3, 0xa9), "\"\xc3\xa9\"");
	whole_is(B(0xa1, 0xff), "\"\\ufffd\"");
	whole_is(B(0xc4, 2, 0x00, 0xab), "{\"bin\":\"00ab\"}");
	whole_is(B(0xd4, 0x05, 0x10), "{\"ext\":5,\"hex\":\"10\"}");
	whole_is(B(0xc7, 1, 0xff, 0x20), "{\"ext\":-1,\"hex\":\"20\"}");
	whole_is(B(0x92, 0x01, 0x91, 0xc0), "[1,[null]]");
	whole_is(B(0x82, 0xa1, 'k', 0x01, 0x02, 0xa1, 'v'),
		 "{\"k\":1,\"2\":\"v\"}");
	whole_is(B(0x81, 0x91, 0xa1, 'x', 0xc3), "{\"[\\\"x\\\"]\":true}");
	whole_is(B(0x90), "[]");
	whole_is(B(0xdc, 0, 1, 0x05), "[5]");
}
END_TEST

START_TEST(test_a_cut_object_shows_what_parsed_and_a_mark)
{
	/* ["abc","de"] of 9 bytes, cut at every length. */
	static const uint8_t a[] = { 0x92, 0xa3, 'a', 'b', 'c', 0xa2, 'd',
				     'e' };
	static const char *const want[] = {
		"\xe2\x80\xa6", "[\xe2\x80\xa6", "[\"\xe2\x80\xa6",
		"[\"a\xe2\x80\xa6", "[\"ab\xe2\x80\xa6",
		"[\"abc\",\xe2\x80\xa6", "[\"abc\",\"\xe2\x80\xa6",
		"[\"abc\",\"d\xe2\x80\xa6",
	};

	for (size_t n = 1; n < sizeof(a); n++)
		prefix_is(a, n, 9, want[n]);
	/* A header cut short shows nothing of its value. */
	prefix_is(B(0x91, 0xcd, 0x01), 5, "[\xe2\x80\xa6");
	/* A UTF-8 sequence cut in two is left out, not shown as U+FFFD. */
	prefix_is(B(0xa4, 'x', 0xc3), 6, "\"x\xe2\x80\xa6");
	/* Whole, but more was said to follow: marked too. */
	prefix_is(B(0xc0), 2, "null\xe2\x80\xa6");
	/* Counts larger than the bytes run out, without a wait or a loop
	 * over the count. */
	prefix_is(B(0xdd, 0xff, 0xff, 0xff, 0xff, 0x01), 1000, "[1,"
		  "\xe2\x80\xa6");
}
END_TEST

START_TEST(test_what_is_not_msgpack_writes_nothing)
{
	uint8_t deep[80];

	is_not(B(0xc1), 1);			/* never used */
	is_not(B(0x92, 0x01, 0xc1), 3);		/* ... inside */
	is_not(B(0x01, 0x02), 2);		/* two objects */
	is_not(B(0x92, 0x01), 2);		/* cut, but whole */
	is_not(B(0xc1, 0x00), 10);		/* bad before the cut */
	is_not(NULL, 0, 0);
	memset(deep, 0x91, sizeof(deep));	/* nested past 64 */
	is_not(deep, sizeof(deep), 1000);
	deep[sizeof(deep) - 1] = 0xc0;
	is_not(deep, sizeof(deep), sizeof(deep));
}
END_TEST

/* ------------------------------------------------ a JSON checker */

/* A strict reader of one JSON value at *p: 0 and *p past it, or -1. */
static int js_value(const char **p, int depth);

static void js_space(const char **p)
{
	while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r')
		(*p)++;
}

static int js_string(const char **p)
{
	if (*(*p)++ != '"')
		return -1;
	for (;;) {
		unsigned char c = (unsigned char)*(*p)++;

		if (c == '"')
			return 0;
		if (c < 0x20)
			return -1;
		if (c != '\\')
			continue;
		c = (unsigned char)*(*p)++;
		if (c == 'u') {
			for (int i = 0; i < 4; i++, (*p)++)
				if (!strchr("0123456789abcdefABCDEF", **p) ||
				    **p == '\0')
					return -1;
		} else if (!strchr("\"\\/bfnrt", c) || c == '\0') {
			return -1;
		}
	}
}

static int js_number(const char **p)
{
	const char *s = *p;

	if (**p == '-')
		(*p)++;
	if (**p == '0')
		(*p)++;
	else if (**p >= '1' && **p <= '9')
		while (**p >= '0' && **p <= '9')
			(*p)++;
	else
		return -1;
	if (**p == '.') {
		(*p)++;
		if (!(**p >= '0' && **p <= '9'))
			return -1;
		while (**p >= '0' && **p <= '9')
			(*p)++;
	}
	if (**p == 'e' || **p == 'E') {
		(*p)++;
		if (**p == '+' || **p == '-')
			(*p)++;
		if (!(**p >= '0' && **p <= '9'))
			return -1;
		while (**p >= '0' && **p <= '9')
			(*p)++;
	}
	return *p > s ? 0 : -1;
}

static int js_items(const char **p, char close, bool keys, int depth)
{
	(*p)++;
	js_space(p);
	if (**p == close) {
		(*p)++;
		return 0;
	}
	for (;;) {
		if (keys) {
			js_space(p);
			if (js_string(p) != 0)
				return -1;
			js_space(p);
			if (*(*p)++ != ':')
				return -1;
		}
		if (js_value(p, depth + 1) != 0)
			return -1;
		js_space(p);
		if (**p == close) {
			(*p)++;
			return 0;
		}
		if (*(*p)++ != ',')
			return -1;
	}
}

static int js_value(const char **p, int depth)
{
	static const char *const words[] = { "null", "true", "false" };

	if (depth > 200)
		return -1;
	js_space(p);
	if (**p == '{')
		return js_items(p, '}', true, depth);
	if (**p == '[')
		return js_items(p, ']', false, depth);
	if (**p == '"')
		return js_string(p);
	for (size_t i = 0; i < 3; i++) {
		size_t n = strlen(words[i]);

		if (strncmp(*p, words[i], n) == 0) {
			*p += n;
			return 0;
		}
	}
	return js_number(p);
}

static bool is_json(const char *s)
{
	if (js_value(&s, 0) != 0)
		return false;
	js_space(&s);
	return *s == '\0';
}

/* ------------------------------------------------ bounded output */

/* n maps, each the key of the one around it, then {"\"":1}, then the n
 * values 1: every key that is not a string inside another such key. */
static size_t nested_keys(uint8_t *buf, size_t n)
{
	size_t len = 0;

	memset(buf, 0x81, n);
	len = n;
	buf[len++] = 0x81;
	buf[len++] = 0xa1;
	buf[len++] = '"';
	buf[len++] = 0x01;
	memset(buf + len, 0x01, n);
	return len + n;
}

START_TEST(test_keys_in_keys_stay_small)
{
	uint8_t buf[256];
	int rc;
	char *got;

	/* Two levels: the inner key is its msgpack's hex. */
	got = render(B(0x81, 0x81, 0x81, 0xa1, 'x', 0x01, 0x02, 0x03), 8, &rc);
	ck_assert_int_eq(rc, MPJSON_WHOLE);
	ck_assert_str_eq(got, "{\"{\\\"81a17801\\\":2}\":3}");
	ck_assert(is_json(got));
	free(got);
	/* 60 levels, whole and cut: well within the budget. */
	for (size_t n = 1; n <= 60; n++) {
		size_t len = nested_keys(buf, n);

		got = render(buf, len, len, &rc);
		ck_assert_int_eq(rc, MPJSON_WHOLE);
		ck_assert_uint_le(strlen(got), 1000);
		ck_assert(is_json(got));
		free(got);
		got = render(buf, len - n, len, &rc);
		ck_assert_int_eq(rc, MPJSON_PREFIX);
		ck_assert_uint_le(strlen(got), 1000);
		free(got);
	}
}
END_TEST

START_TEST(test_long_json_is_cut_at_the_budget)
{
	/* A bin of 4000 bytes is 8000 digits: cut, marked. */
	static uint8_t buf[4004];
	int rc;
	char *got;

	buf[0] = 0xc5;
	buf[1] = 4000 >> 8;
	buf[2] = 4000 & 0xff;
	got = render(buf, 4003, 4003, &rc);
	ck_assert_int_eq(rc, MPJSON_PREFIX);
	ck_assert_uint_eq(strlen(got), MPJSON_BUDGET + 3);
	ck_assert_str_eq(got + MPJSON_BUDGET, "\xe2\x80\xa6");
	free(got);
	/* Not msgpack stays refused, however long the JSON before. */
	buf[4003] = 0xc1;
	is_not(buf, sizeof(buf), sizeof(buf));
}
END_TEST

/* A deterministic generator (xorshift64*). */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * UINT64_C(2685821657736338717);
}

/* Random bytes, biased toward the type bytes that nest and the small
 * ones that end a value. */
static size_t random_bytes(uint64_t *s, uint8_t *buf)
{
	static const uint8_t often[] = { 0x81, 0x82, 0x91, 0x92, 0xa1,
					 0x22, 0x5c, 0x01, 0xc0, 0xc4,
					 0x01, 0xde, 0x00, 0x02, 0x8f };
	size_t len = 1 + rnd(s) % 256;

	for (size_t i = 0; i < len; i++)
		buf[i] = rnd(s) % 2 ? often[rnd(s) % sizeof(often)] :
				      (uint8_t)rnd(s);
	return len;
}

START_TEST(test_random_bytes_stay_bounded_and_json)
{
	uint64_t seed = UINT64_C(0x9e3779b97f4a7c15);
	uint8_t buf[256];
	size_t nests = 0;

	for (int i = 0; i < 200000; i++) {
		size_t len = random_bytes(&seed, buf);
		uint64_t whole = rnd(&seed) % 4 ? len : len + 1 + rnd(&seed) % 9;
		int rc;
		char *got;

		/* Sometimes the reviewer's shape, mutated. */
		if (i % 10 == 0) {
			len = nested_keys(buf, 1 + rnd(&seed) % 60);
			buf[rnd(&seed) % len] = (uint8_t)rnd(&seed);
			whole = len;
		}
		got = render(buf, len, whole, &rc);
		ck_assert_uint_le(strlen(got), MPJSON_BUDGET + 3);
		if (rc == MPJSON_WHOLE) {
			ck_assert_msg(is_json(got), "not JSON: %s", got);
			nests += strchr(got, '{') != NULL;
		} else if (rc == MPJSON_NOT) {
			ck_assert_str_eq(got, "");
		} else {
			ck_assert_int_eq(rc, MPJSON_PREFIX);
		}
		free(got);
	}
	/* The bytes did reach maps, so the test looked at something. */
	ck_assert_uint_gt(nests, 100);
}
END_TEST

static char *text(size_t (*put)(FILE *, const void *, size_t, size_t),
		  const char *s, size_t max, size_t *cols)
{
	char *out = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&out, &n);

	ck_assert_ptr_nonnull(f);
	*cols = put(f, s, strlen(s), max);
	ck_assert_int_eq(fclose(f), 0);
	return out;
}

START_TEST(test_json_text_for_a_person)
{
	size_t cols;
	char *t;

	/* As it is, its backslashes too. */
	t = text(text_put_json, "[\"a\\\"b\"]", 0, &cols);
	ck_assert_str_eq(t, "[\"a\\\"b\"]");
	ck_assert_uint_eq(cols, 8);
	free(t);
	/* What would not show plainly, as JSON's escape. */
	t = text(text_put_json, "\"a\xe2\x80\xae" "b\x1b\"", 0, &cols);
	ck_assert_str_eq(t, "\"a\\u202eb\\u001b\"");
	free(t);
	/* Clipped to max columns, the mark the last. */
	t = text(text_put_json, "[1,2,3,4]", 5, &cols);
	ck_assert_str_eq(t, "[1,2\xe2\x80\xa6");
	ck_assert_uint_eq(cols, 5);
	free(t);
	t = text(text_put_json, "[1,2]", 5, &cols);
	ck_assert_str_eq(t, "[1,2]");
	free(t);
	/* Bytes for a person: escaped as text_put_bytes() does. */
	t = text(text_put_clipped, "a\\b\xff", 0, &cols);
	ck_assert_str_eq(t, "a\\\\b\\xff");
	ck_assert_uint_eq(cols, 8);
	free(t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mpjson");
	TCase *tc = tcase_create("mpjson");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_every_type_is_json);
	tcase_add_test(tc, test_a_cut_object_shows_what_parsed_and_a_mark);
	tcase_add_test(tc, test_what_is_not_msgpack_writes_nothing);
	tcase_add_test(tc, test_json_text_for_a_person);
	tcase_add_test(tc, test_keys_in_keys_stay_small);
	tcase_add_test(tc, test_long_json_is_cut_at_the_budget);
	tcase_add_test(tc, test_random_bytes_stay_bounded_and_json);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
