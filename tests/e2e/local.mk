# tests/e2e: the whole contract against a real carmyd and real processes.
# Every program links the shared helpers in tests/e2e/e2e.c.
E2E_SOURCES = tests/e2e/e2e.h tests/e2e/e2e.c

check_PROGRAMS += tests/e2e/check_contract
TESTS += tests/e2e/check_contract
tests_e2e_check_contract_SOURCES = tests/e2e/check_contract.c $(E2E_SOURCES)
tests_e2e_check_contract_CFLAGS = $(TEST_CFLAGS) -pthread
tests_e2e_check_contract_LDADD = $(TEST_LIBS) -lpthread

check_PROGRAMS += tests/e2e/check_races
TESTS += tests/e2e/check_races
tests_e2e_check_races_SOURCES = tests/e2e/check_races.c $(E2E_SOURCES)
tests_e2e_check_races_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_races_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_owners
TESTS += tests/e2e/check_owners
tests_e2e_check_owners_SOURCES = tests/e2e/check_owners.c $(E2E_SOURCES)
tests_e2e_check_owners_CFLAGS = $(TEST_CFLAGS) -pthread
tests_e2e_check_owners_LDADD = $(TEST_LIBS) -lpthread

check_PROGRAMS += tests/e2e/check_capacity
TESTS += tests/e2e/check_capacity
tests_e2e_check_capacity_SOURCES = tests/e2e/check_capacity.c $(E2E_SOURCES)
tests_e2e_check_capacity_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_capacity_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_prefault
TESTS += tests/e2e/check_prefault
tests_e2e_check_prefault_SOURCES = tests/e2e/check_prefault.c $(E2E_SOURCES)
tests_e2e_check_prefault_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_prefault_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_huge
TESTS += tests/e2e/check_huge
tests_e2e_check_huge_SOURCES = tests/e2e/check_huge.c $(E2E_SOURCES)
tests_e2e_check_huge_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_huge_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_restart
TESTS += tests/e2e/check_restart
tests_e2e_check_restart_SOURCES = tests/e2e/check_restart.c $(E2E_SOURCES)
tests_e2e_check_restart_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_restart_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_security
TESTS += tests/e2e/check_security
tests_e2e_check_security_SOURCES = tests/e2e/check_security.c $(E2E_SOURCES)
tests_e2e_check_security_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_security_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_trust
TESTS += tests/e2e/check_trust
tests_e2e_check_trust_SOURCES = tests/e2e/check_trust.c $(E2E_SOURCES)
tests_e2e_check_trust_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_trust_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_liveness
TESTS += tests/e2e/check_liveness
tests_e2e_check_liveness_SOURCES = tests/e2e/check_liveness.c $(E2E_SOURCES)
tests_e2e_check_liveness_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_liveness_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_loops
TESTS += tests/e2e/check_loops
tests_e2e_check_loops_SOURCES = tests/e2e/check_loops.c $(E2E_SOURCES)
tests_e2e_check_loops_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_loops_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_journal
TESTS += tests/e2e/check_journal
tests_e2e_check_journal_SOURCES = tests/e2e/check_journal.c $(E2E_SOURCES)
tests_e2e_check_journal_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_journal_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_store_plugin
TESTS += tests/e2e/check_store_plugin
tests_e2e_check_store_plugin_SOURCES = tests/e2e/check_store_plugin.c $(E2E_SOURCES)
tests_e2e_check_store_plugin_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_store_plugin_LDADD = $(TEST_LIBS)
# A plugin of the store ABI before this one, which carmyd must refuse.
check_LTLIBRARIES += tests/e2e/store_abi2.la
tests_e2e_store_abi2_la_SOURCES = tests/e2e/store_abi2.c
tests_e2e_store_abi2_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere

check_PROGRAMS += tests/e2e/check_settle
TESTS += tests/e2e/check_settle
tests_e2e_check_settle_SOURCES = tests/e2e/check_settle.c $(E2E_SOURCES)
tests_e2e_check_settle_CFLAGS = $(TEST_CFLAGS) -pthread
tests_e2e_check_settle_LDADD = $(TEST_LIBS) -lpthread

check_PROGRAMS += tests/e2e/check_retain
TESTS += tests/e2e/check_retain
tests_e2e_check_retain_SOURCES = tests/e2e/check_retain.c $(E2E_SOURCES)
tests_e2e_check_retain_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_retain_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_calls
TESTS += tests/e2e/check_calls
tests_e2e_check_calls_SOURCES = tests/e2e/check_calls.c $(E2E_SOURCES)
tests_e2e_check_calls_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_calls_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_limits
TESTS += tests/e2e/check_limits
tests_e2e_check_limits_SOURCES = tests/e2e/check_limits.c $(E2E_SOURCES)
tests_e2e_check_limits_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_limits_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/e2e/check_fork
TESTS += tests/e2e/check_fork
tests_e2e_check_fork_SOURCES = tests/e2e/check_fork.c $(E2E_SOURCES)
tests_e2e_check_fork_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_fork_LDADD = $(TEST_LIBS)

# Which segment carmyd serves when the socket's path is spelt otherwise.
TESTS += tests/e2e/segment.test
dist_check_SCRIPTS += tests/e2e/segment.test
# carmyd's threads are named.
TESTS += tests/e2e/threads.test
dist_check_SCRIPTS += tests/e2e/threads.test

# Two carmyds sharing one real PostgreSQL through the PostgreSQL store
# (stores/pg/): tests/e2e/shared.test starts a throwaway cluster and runs
# check_shared.
if HAVE_LIBPQ
check_PROGRAMS += tests/e2e/check_shared
tests_e2e_check_shared_SOURCES = tests/e2e/check_shared.c $(E2E_SOURCES)
tests_e2e_check_shared_CFLAGS = $(TEST_CFLAGS)
tests_e2e_check_shared_LDADD = $(TEST_LIBS)
TESTS += tests/e2e/shared.test
dist_check_SCRIPTS += tests/e2e/shared.test
# The same two carmyds under load while the server crashes and freezes.
TESTS += tests/e2e/pg_faults.test
dist_check_SCRIPTS += tests/e2e/pg_faults.test
endif

# check_journal's torn-tail sweep cuts a journal at 30 random bytes natively
# and at 3 under a sanitiser (each cut starts carmyd twice; see
# test_torn_journal_restores_a_clean_prefix). The full native sweep, in any
# build, with Check's timeout raised to match:
#
#   make check-torn-sweep [TORN_SWEEP_CUTS=30]
#
# (or CARMY_TORN_CUTS=N in the environment of any run of check_journal).
TORN_SWEEP_CUTS = 30

.PHONY: check-torn-sweep
check-torn-sweep:
	$(MAKE) $(AM_MAKEFLAGS) check TESTS=tests/e2e/check_journal \
		CARMY_TORN_CUTS=$(TORN_SWEEP_CUTS) CK_RUN_CASE=journal \
		CK_TIMEOUT_MULTIPLIER=10

# The latencies Carmy promises (a dead owner noticed, an answer at the
# connection limit) are printed by every run and asserted only here, on a
# machine kept quiet for it: see e2e_within in tests/e2e/e2e.h.
.PHONY: check-timing
check-timing:
	$(MAKE) $(AM_MAKEFLAGS) check CARMY_TIMING=1 \
		TESTS='tests/e2e/check_owners tests/e2e/check_limits'
