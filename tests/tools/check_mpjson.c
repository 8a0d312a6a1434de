/*
 * check_mpjson.c - a call's arguments as an operator sees them
 * (tools/mpjson.c, and tools/text.c's text_put_json and text_put_clipped):
 * every msgpack type as JSON, a cut object as far as it parses and marked,
 * and what is not msgpack refused with nothing written, whatever the bytes.
 */
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
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
