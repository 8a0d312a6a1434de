# tests/common: the small helpers of common/ on their own.
check_PROGRAMS += tests/common/check_age
TESTS += tests/common/check_age
tests_common_check_age_SOURCES = tests/common/check_age.c
tests_common_check_age_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_common_check_age_LDADD = common/libcommon.la $(CHECK_LIBS)
