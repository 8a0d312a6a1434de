# tests/: one Check program per module, plus end-to-end tests against a real
# carmyd. Long soaks and benchmarks are separate targets.
check_LTLIBRARIES += tests/libharness.la
tests_libharness_la_SOURCES = tests/harness.h tests/harness.c

TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(URCU_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
TEST_LIBS = tests/libharness.la libclient/libcarmy.la shm/libshm.la common/libcommon.la \
	libclient/libwire.la $(CHECK_LIBS) $(MSGPACK_LIBS) $(XXHASH_LIBS)

include tests/common/local.mk
include tests/stores/local.mk
include tests/e2e/local.mk
include tests/tools/local.mk
include tests/gateway/local.mk
include tests/systemd/local.mk
include tests/bench/local.mk
include tests/shm/local.mk
include tests/model/local.mk
include tests/fuzz/local.mk
include tests/soak/local.mk

# The layering of the tree, read off the built objects.
TESTS += tests/layering.test
dist_check_SCRIPTS += tests/layering.test
EXTRA_DIST += scripts/layering.py

# The files the documentation names exist.
TESTS += tests/docs.test
dist_check_SCRIPTS += tests/docs.test

# The man pages match the programs' options, carmy.h and the version.
TESTS += tests/man.test
dist_check_SCRIPTS += tests/man.test
