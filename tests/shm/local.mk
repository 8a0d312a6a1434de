# tests/shm: the segment and table in one process.
check_PROGRAMS += tests/shm/check_table
TESTS += tests/shm/check_table
tests_shm_check_table_SOURCES = tests/shm/check_table.c
tests_shm_check_table_CFLAGS = $(TEST_CFLAGS) -pthread
tests_shm_check_table_LDADD = shm/libshm.la $(CHECK_LIBS) $(XXHASH_LIBS) -lpthread

# The reserve's prefetches survive the compiler (objdump of libcarmy).
TESTS += tests/shm/prefetch.test
dist_check_SCRIPTS += tests/shm/prefetch.test
