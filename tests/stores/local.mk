# tests/stores: the store back-ends on their own.
check_PROGRAMS += tests/stores/check_journal
TESTS += tests/stores/check_journal
tests_stores_check_journal_SOURCES = tests/stores/check_journal.c
tests_stores_check_journal_CFLAGS = $(TEST_CFLAGS) -pthread
tests_stores_check_journal_LDADD = stores/libstores.la common/liblog.la common/libcommon.la \
	$(CHECK_LIBS) $(XXHASH_LIBS) -lpthread
# Fault injection: the journal's fsync(), fdatasync() and pwrite() go
# through the test's wrappers (the library is linked in statically).
tests_stores_check_journal_LDFLAGS = -Wl,--wrap=fsync -Wl,--wrap=fdatasync \
	-Wl,--wrap=pwrite

# The PostgreSQL store (stores/pg/) driven through its ops table against a
# throwaway cluster: tests/stores/store_pg.test starts one
# (tests/pg_cluster.sh) and runs check_store_pg with PG_CONNINFO set.
if HAVE_LIBPQ
check_PROGRAMS += tests/stores/check_store_pg
tests_stores_check_store_pg_SOURCES = tests/stores/check_store_pg.c
tests_stores_check_store_pg_CFLAGS = $(TEST_CFLAGS) $(LIBPQ_CFLAGS) -pthread
tests_stores_check_store_pg_LDADD = $(CHECK_LIBS) $(LIBPQ_LIBS) -ldl -lpthread
# Fault injection: the plugin's PQcmdTuples(), PQgetisnull() and
# PQnfields() are the test's own.
tests_stores_check_store_pg_LDFLAGS = \
	-Wl,--export-dynamic-symbol=PQcmdTuples \
	-Wl,--export-dynamic-symbol=PQgetisnull \
	-Wl,--export-dynamic-symbol=PQnfields
TESTS += tests/stores/store_pg.test
dist_check_SCRIPTS += tests/stores/store_pg.test
endif
EXTRA_DIST += tests/pg_cluster.sh
