/*
 * check_age.c - ages as carmyd's --retain and carmyctl's --older-than read
 * them (common/age.c): every unit, the limits, and what is refused.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "common/age.h"

static uint64_t parsed(const char *s)
{
	uint64_t ns = 42;

	ck_assert_msg(age_parse(s, &ns) == 0, "'%s' refused", s);
	return ns;
}

static void refused(const char *s)
{
	uint64_t ns = 42;

	ck_assert_msg(age_parse(s, &ns) == -EINVAL, "'%s' accepted", s);
	ck_assert_uint_eq(ns, 42);
}

START_TEST(test_every_unit)
{
	ck_assert_uint_eq(parsed("0"), 0);
	ck_assert_uint_eq(parsed("90"), 90000000000ull);
	ck_assert_uint_eq(parsed("90s"), 90000000000ull);
	ck_assert_uint_eq(parsed("200ms"), 200000000ull);
	ck_assert_uint_eq(parsed("15m"), 900000000000ull);
	ck_assert_uint_eq(parsed("2h"), 7200000000000ull);
	ck_assert_uint_eq(parsed("7d"), 604800000000000ull);
	ck_assert_uint_eq(parsed("007s"), 7000000000ull);
}
END_TEST

START_TEST(test_what_is_refused)
{
	static const char *const bad[] = {
		"", "s", "-1s", "+1s", " 1s", "1s ", "1.5h", "1sec", "1mss",
		"1ss", "1 h", "1y", "0x10", "ms", "1S", "1H",
		/* past UINT64_MAX ns, in digits and in units */
		"18446744073709551616", "18446744074s", "213504d",
		"99999999999999999999999999ms",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		refused(bad[i]);
	/* The largest that fit. */
	ck_assert_uint_eq(parsed("18446744073s"), 18446744073000000000ull);
	ck_assert_uint_eq(parsed("213503d"), 213503ull * 86400000000000ull);
}
END_TEST

START_TEST(test_format_uses_the_largest_exact_unit)
{
	char buf[AGE_TEXT_MAX];

	ck_assert_str_eq(age_format(buf, 86400000000000ull), "24h");
	ck_assert_str_eq(age_format(buf, 2 * 86400000000000ull), "2d");
	ck_assert_str_eq(age_format(buf, 7 * 86400000000000ull), "7d");
	ck_assert_str_eq(age_format(buf, 25 * 3600000000000ull), "25h");
	ck_assert_str_eq(age_format(buf, 90000000000ull), "90s");
	ck_assert_str_eq(age_format(buf, 120000000000ull), "2m");
	ck_assert_str_eq(age_format(buf, 200000000ull), "200ms");
	ck_assert_str_eq(age_format(buf, 1500000000ull), "1500ms");
	ck_assert_str_eq(age_format(buf, 1500000ull), "1ms");
	ck_assert_str_eq(age_format(buf, 0), "0ms");
	ck_assert_str_eq(age_format(buf, UINT64_MAX), "18446744073709ms");
	/* What it writes reads back. */
	ck_assert_uint_eq(parsed(age_format(buf, 7200000000000ull)),
			  7200000000000ull);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("age");
	TCase *tc = tcase_create("age");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_every_unit);
	tcase_add_test(tc, test_what_is_refused);
	tcase_add_test(tc, test_format_uses_the_largest_exact_unit);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
