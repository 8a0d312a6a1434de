# tests/daemon: carmyd's modules on their own.
check_PROGRAMS += tests/daemon/check_journal
TESTS += tests/daemon/check_journal
tests_daemon_check_journal_SOURCES = tests/daemon/check_journal.c \
	daemon/journal.c daemon/journal_recover.c daemon/journal_index.c \
	daemon/journal_compact.c daemon/journal.h daemon/journal_int.h \
	daemon/log.c daemon/log.h
tests_daemon_check_journal_CFLAGS = $(TEST_CFLAGS) -pthread
tests_daemon_check_journal_LDADD = $(CHECK_LIBS) $(XXHASH_LIBS) -lpthread
# Fault injection: the journal's fsync(), fdatasync() and pwrite() go
# through the test's wrappers.
tests_daemon_check_journal_LDFLAGS = -Wl,--wrap=fsync -Wl,--wrap=fdatasync \
	-Wl,--wrap=pwrite

# The example store plugin (daemon/store_text.c), built as a real shared
# object for tests/e2e/check_store_plugin; not installed.
check_LTLIBRARIES += daemon/carmy_store_text.la
daemon_carmy_store_text_la_SOURCES = daemon/store_text.c
daemon_carmy_store_text_la_CFLAGS = $(AM_CFLAGS) -pthread
daemon_carmy_store_text_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere

# The PostgreSQL store (daemon/store_pg.c) driven through its ops table
# against a throwaway cluster: tests/daemon/store_pg.test starts one
# (tests/pg_cluster.sh) and runs check_store_pg with PG_CONNINFO set.
if HAVE_LIBPQ
check_PROGRAMS += tests/daemon/check_store_pg
tests_daemon_check_store_pg_SOURCES = tests/daemon/check_store_pg.c
tests_daemon_check_store_pg_CFLAGS = $(TEST_CFLAGS) $(LIBPQ_CFLAGS) -pthread
tests_daemon_check_store_pg_LDADD = $(CHECK_LIBS) $(LIBPQ_LIBS) -ldl -lpthread
TESTS += tests/daemon/store_pg.test
dist_check_SCRIPTS += tests/daemon/store_pg.test
endif
EXTRA_DIST += tests/pg_cluster.sh
