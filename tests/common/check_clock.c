/*
 * check_clock.c - clock_real_held(): the wall clock retention counts ages
 * by, which follows the wall clock but holds a step forward back for a
 * while (a clock stepped a day ahead must not make every completed entry a
 * day older at once), and counts suspended time as time gone by.
 */
#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "common/clock.h"

#define S 1000000000ull
#define HOLD (3600 * S)

START_TEST(test_the_first_reading_is_the_wall_clock)
{
	struct clock_held c = { 0, 0, 0 };
	uint64_t stepped = 7;

	ck_assert_uint_eq(clock_real_held(&c, 1000 * S, 5 * S, HOLD, &stepped),
			  1000 * S);
	ck_assert_uint_eq(stepped, 0);
}
END_TEST

START_TEST(test_a_step_forward_is_held_back_then_let_go)
{
	struct clock_held c = { 0, 0, 0 };
	uint64_t stepped;

	clock_real_held(&c, 1000 * S, 5 * S, HOLD, &stepped);
	/* Ten boot seconds on, the wall clock says a day later: a step,
	 * said once. */
	ck_assert_uint_eq(clock_real_held(&c, 1000 * S + 86400 * S, 15 * S,
					  HOLD, &stepped), 1010 * S);
	ck_assert_uint_eq(stepped, 86400 * S - 10 * S);
	ck_assert_uint_eq(clock_real_held(&c, 1000 * S + 86410 * S, 25 * S,
					  HOLD, &stepped), 1020 * S);
	ck_assert_uint_eq(stepped, 0);
	/* Held for HOLD of boot time from the step: then the wall clock. */
	ck_assert_uint_eq(clock_real_held(&c, 1000 * S + 86400 * S + HOLD,
					  15 * S + HOLD - S, HOLD, &stepped),
			  1010 * S + HOLD - S);
	ck_assert_uint_eq(clock_real_held(&c, 1000 * S + 86400 * S + HOLD,
					  15 * S + HOLD, HOLD, &stepped),
			  1000 * S + 86400 * S + HOLD);
	ck_assert_uint_eq(stepped, 0);
	/* And followed from then on. */
	ck_assert_uint_eq(clock_real_held(&c, 1000 * S + 86410 * S + HOLD,
					  25 * S + HOLD, HOLD, &stepped),
			  1000 * S + 86410 * S + HOLD);
}
END_TEST

START_TEST(test_suspend_a_slew_and_a_step_back_are_followed)
{
	struct clock_held c = { 0, 0, 0 };
	uint64_t stepped;

	clock_real_held(&c, 1000 * S, 5 * S, HOLD, &stepped);
	/* Suspended eight hours: the boot clock counts them too. */
	ck_assert_uint_eq(clock_real_held(&c, 1000 * S + 28800 * S,
					  5 * S + 28800 * S, HOLD, &stepped),
			  1000 * S + 28800 * S);
	ck_assert_uint_eq(stepped, 0);
	/* An NTP slew, a little faster than the boot clock: followed. */
	ck_assert_uint_eq(clock_real_held(&c, 1000 * S + 28810 * S + S / 2,
					  15 * S + 28800 * S, HOLD, &stepped),
			  1000 * S + 28810 * S + S / 2);
	ck_assert_uint_eq(stepped, 0);
	/* A step back: followed (entries are then kept longer). */
	ck_assert_uint_eq(clock_real_held(&c, 900 * S, 16 * S + 28800 * S,
					  HOLD, &stepped), 900 * S);
	ck_assert_uint_eq(stepped, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("clock");
	TCase *tc = tcase_create("clock");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_the_first_reading_is_the_wall_clock);
	tcase_add_test(tc, test_a_step_forward_is_held_back_then_let_go);
	tcase_add_test(tc, test_suspend_a_slew_and_a_step_back_are_followed);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
