# tests/daemon: carmyd's modules on their own.
check_PROGRAMS += tests/daemon/check_journal
TESTS += tests/daemon/check_journal
tests_daemon_check_journal_SOURCES = tests/daemon/check_journal.c \
	daemon/journal.c daemon/journal.h daemon/log.c daemon/log.h
tests_daemon_check_journal_CFLAGS = $(TEST_CFLAGS) -pthread
tests_daemon_check_journal_LDADD = $(CHECK_LIBS) $(XXHASH_LIBS) -lpthread
