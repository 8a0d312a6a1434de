/*
 * check_version.c - carmy_version() against the header's CARMY_VERSION_*
 * macros and against the package version configure was given (config.h's
 * PACKAGE_VERSION, from AC_INIT), so that the three never drift apart.
 */
#include <stdio.h>
#include <string.h>

#include <check.h>

#include "carmy.h"

START_TEST(test_version_numbers_are_the_headers)
{
	int major = -1, minor = -1, patch = -1;

	carmy_version(&major, &minor, &patch);
	ck_assert_int_eq(major, CARMY_VERSION_MAJOR);
	ck_assert_int_eq(minor, CARMY_VERSION_MINOR);
	ck_assert_int_eq(patch, CARMY_VERSION_PATCH);
}
END_TEST

START_TEST(test_version_string_is_the_headers_and_configures)
{
	const char *v = carmy_version(NULL, NULL, NULL);
	char built[32];

	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(v, CARMY_VERSION_STRING);
	ck_assert_str_eq(v, PACKAGE_VERSION);
	snprintf(built, sizeof(built), "%d.%d.%d", CARMY_VERSION_MAJOR,
		 CARMY_VERSION_MINOR, CARMY_VERSION_PATCH);
	ck_assert_str_eq(v, built);
}
END_TEST

START_TEST(test_version_accepts_any_null_pointer)
{
	int major = -1, patch = -1;

	ck_assert_str_eq(carmy_version(&major, NULL, &patch),
			 CARMY_VERSION_STRING);
	ck_assert_int_eq(major, CARMY_VERSION_MAJOR);
	ck_assert_int_eq(patch, CARMY_VERSION_PATCH);
}
END_TEST

static Suite *version_suite(void)
{
	Suite *s = suite_create("version");
	TCase *tc = tcase_create("version");

	tcase_add_test(tc, test_version_numbers_are_the_headers);
	tcase_add_test(tc, test_version_string_is_the_headers_and_configures);
	tcase_add_test(tc, test_version_accepts_any_null_pointer);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(version_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
