# tests/soak: the chaos soak (soak.c says how it works).
#
# The short run (both modes, about 25 s) is part of make check. The long
# run is its own target:
#
#   make soak [SOAK_SECONDS=600] [SOAK_WORKERS=12] [SOAK_MODE=carmyd]
#             [SOAK_IDS=200] [SOAK_KILL_MS=10] [SOAK_CARMYD_MS=2000]
#             [SOAK_ARGS=...]
#
# SOAK_MODE is workers (only workers are killed), carmyd (carmyd is killed
# and restarted too) or both (one after the other, half the time each).
# SOAK_ARGS passes more options, e.g. SOAK_ARGS='--seed 42 --keep', or
# SOAK_ARGS=--journal: carmyd on the journal store, every other carmyd kill
# a simulated reboot (tests/soak/journal.test is its short run).
#
# The soak of the shared store, two carmyds on one real PostgreSQL, the
# database crashed at random (tests/soak/shared.test is its short run, in
# make check; both skip when no PostgreSQL server is installed):
#
#   make soak-shared [SOAK_SECONDS=600] [SOAK_WORKERS=12] [SOAK_IDS=200]
#                    [SOAK_KILL_MS=10] [SOAK_CARMYD_MS=2000]
#                    [SOAK_PG_MS=5000] [SOAK_FLOORS=1000,20,5]
#                    [SOAK_TODO=KIND,...] [SOAK_ARGS=...]
#
# It prints its counts (cycles, worker kills, carmyd kills, PostgreSQL
# crashes, STORE_FAILED answers, double executions, lost acknowledged
# completions by kind, wrong replays) and fails unless it reached
# SOAK_FLOORS (worker kills, carmyd kills, database crashes). SOAK_TODO
# names kinds of failure known to be open (soak.h): reported with a
# trace, but not failing the run; empty by default, so that the long run
# fails on every kind.
check_PROGRAMS += tests/soak/soak
TESTS += tests/soak/soak
# The same against the journal store, with simulated reboots.
TESTS += tests/soak/journal.test
dist_check_SCRIPTS += tests/soak/journal.test
# Two carmyds on one PostgreSQL, the database crashed too.
TESTS += tests/soak/shared.test
dist_check_SCRIPTS += tests/soak/shared.test
tests_soak_soak_SOURCES = tests/soak/soak.h tests/soak/soak.c \
	tests/soak/worker.c tests/soak/verify.c tests/soak/check.c \
	tests/soak/calls.c
tests_soak_soak_CFLAGS = $(TEST_CFLAGS)
tests_soak_soak_LDADD = $(TEST_LIBS)

SOAK_SECONDS = 600
SOAK_WORKERS = 12
SOAK_MODE = carmyd
SOAK_IDS = 200
SOAK_KILL_MS = 10
SOAK_CARMYD_MS = 2000
SOAK_ARGS =
SOAK_PG_MS = 5000
SOAK_FLOORS = 1000,20,5
SOAK_TODO =

.PHONY: soak
soak: tests/soak/soak$(EXEEXT) daemon/carmyd$(EXEEXT)
	CARMY_BUILDDIR='$(abs_top_builddir)' ./tests/soak/soak \
		--seconds $(SOAK_SECONDS) --workers $(SOAK_WORKERS) \
		--mode $(SOAK_MODE) --ids $(SOAK_IDS) \
		--kill-ms $(SOAK_KILL_MS) --carmyd-ms $(SOAK_CARMYD_MS) \
		$(SOAK_ARGS)

.PHONY: soak-shared
soak-shared: all tests/soak/soak$(EXEEXT)
	CARMY_BUILDDIR='$(abs_top_builddir)' \
	CARMY_SRCDIR='$(abs_top_srcdir)' \
		$(SHELL) $(top_srcdir)/tests/soak/shared.test \
		--seconds $(SOAK_SECONDS) \
		--workers $(SOAK_WORKERS) --ids $(SOAK_IDS) \
		--kill-ms $(SOAK_KILL_MS) --carmyd-ms $(SOAK_CARMYD_MS) \
		--pg-ms $(SOAK_PG_MS) --floors $(SOAK_FLOORS) \
		--todo '$(SOAK_TODO)' $(SOAK_ARGS)
