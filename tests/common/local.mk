# tests/common: the small helpers of common/ on their own.
check_PROGRAMS += tests/common/check_age
TESTS += tests/common/check_age
tests_common_check_age_SOURCES = tests/common/check_age.c
tests_common_check_age_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_common_check_age_LDADD = common/libcommon.la $(CHECK_LIBS)

# The service manager's protocols and the default socket paths.
check_PROGRAMS += tests/common/check_service
TESTS += tests/common/check_service
tests_common_check_service_SOURCES = tests/common/check_service.c
tests_common_check_service_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_common_check_service_LDADD = common/libcommon.la $(CHECK_LIBS)

# The log's journal detection and level prefixes.
check_PROGRAMS += tests/common/check_log
TESTS += tests/common/check_log
tests_common_check_log_SOURCES = tests/common/check_log.c
tests_common_check_log_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_common_check_log_LDADD = common/liblog.la $(CHECK_LIBS)

# The held wall clock retention counts ages by (common/clock.h).
check_PROGRAMS += tests/common/check_clock
TESTS += tests/common/check_clock
tests_common_check_clock_SOURCES = tests/common/check_clock.c
tests_common_check_clock_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_common_check_clock_LDADD = $(CHECK_LIBS)
