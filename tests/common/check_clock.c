/*
 * check_clock.c - clock_real_bounded(): the wall clock retention counts
 * ages by, which follows the wall clock but never runs faster than the
 * monotonic one (a clock stepped forward must not make every completed
 * entry old at once).
 */
#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "common/clock.h"

#define S 1000000000ull

START_TEST(test_the_first_reading_is_the_wall_clock)
{
	uint64_t lr = 0, lm = 0, ahead = 7;

	ck_assert_uint_eq(clock_real_bounded(1000 * S, 5 * S, &lr, &lm,
					     &ahead), 1000 * S);
	ck_assert_uint_eq(ahead, 0);
	ck_assert_uint_eq(lr, 1000 * S);
	ck_assert_uint_eq(lm, 5 * S);
}
END_TEST

START_TEST(test_a_step_forward_is_held_to_the_monotonic_clock)
{
	uint64_t lr = 0, lm = 0, ahead;

	clock_real_bounded(1000 * S, 5 * S, &lr, &lm, &ahead);
	/* Ten monotonic seconds on, the wall clock says a day later. */
	ck_assert_uint_eq(clock_real_bounded(1000 * S + 86400 * S, 15 * S,
					     &lr, &lm, &ahead), 1010 * S);
	ck_assert_uint_eq(ahead, 86400 * S - 10 * S);
	/* And stays behind by the step from then on. */
	ck_assert_uint_eq(clock_real_bounded(1000 * S + 86410 * S, 25 * S,
					     &lr, &lm, &ahead), 1020 * S);
	ck_assert_uint_eq(ahead, 86400 * S - 10 * S);
}
END_TEST

START_TEST(test_the_wall_clock_is_followed_when_it_keeps_pace_or_steps_back)
{
	uint64_t lr = 0, lm = 0, ahead;

	clock_real_bounded(1000 * S, 5 * S, &lr, &lm, &ahead);
	ck_assert_uint_eq(clock_real_bounded(1010 * S, 15 * S, &lr, &lm,
					     &ahead), 1010 * S);
	ck_assert_uint_eq(ahead, 0);
	/* Slower than the monotonic clock (an NTP slew): followed. */
	ck_assert_uint_eq(clock_real_bounded(1015 * S, 25 * S, &lr, &lm,
					     &ahead), 1015 * S);
	/* A step back: followed (entries are then kept longer). */
	ck_assert_uint_eq(clock_real_bounded(900 * S, 26 * S, &lr, &lm,
					     &ahead), 900 * S);
	ck_assert_uint_eq(ahead, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("clock");
	TCase *tc = tcase_create("clock");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_the_first_reading_is_the_wall_clock);
	tcase_add_test(tc, test_a_step_forward_is_held_to_the_monotonic_clock);
	tcase_add_test(tc,
		test_the_wall_clock_is_followed_when_it_keeps_pace_or_steps_back);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
