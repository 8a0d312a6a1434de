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
check_PROGRAMS += tests/soak/soak
TESTS += tests/soak/soak
# The same against the journal store, with simulated reboots.
TESTS += tests/soak/journal.test
dist_check_SCRIPTS += tests/soak/journal.test
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

.PHONY: soak
soak: tests/soak/soak$(EXEEXT) daemon/carmyd$(EXEEXT)
	CARMY_BUILDDIR='$(abs_top_builddir)' ./tests/soak/soak \
		--seconds $(SOAK_SECONDS) --workers $(SOAK_WORKERS) \
		--mode $(SOAK_MODE) --ids $(SOAK_IDS) \
		--kill-ms $(SOAK_KILL_MS) --carmyd-ms $(SOAK_CARMYD_MS) \
		$(SOAK_ARGS)
