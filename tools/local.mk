# tools/: programs people run.

# carmy-run: wraps a command with idempotency.
bin_PROGRAMS += tools/carmy-run
tools_carmy_run_SOURCES = tools/carmy-run.c tools/json.h tools/json.c \
	tools/supervise.h tools/supervise.c
tools_carmy_run_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS)
tools_carmy_run_LDADD = libclient/libcarmy.la $(MSGPACK_LIBS)

# carmyctl: the operator's tool. It reads the segment and the journal with
# carmyd's own code (shm/, daemon/journal*.c) and speaks the wire protocol.
bin_PROGRAMS += tools/carmyctl
tools_carmyctl_SOURCES = tools/carmyctl.c tools/json.h tools/json.c \
	tools/text.h tools/text.c \
	daemon/journal.c daemon/journal_recover.c daemon/journal_index.c \
	daemon/journal_compact.c daemon/journal.h daemon/journal_int.h \
	daemon/log.c daemon/log.h
tools_carmyctl_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS) -pthread
tools_carmyctl_LDADD = libclient/libcarmy.la shm/libshm.la \
	libclient/libwire.la libclient/libtrust.la $(MSGPACK_LIBS) $(XXHASH_LIBS) -lpthread

# carmy-bench: measures a running carmyd against this machine's floors and,
# when built with hiredis and libpq, against Redis and PostgreSQL.
bin_PROGRAMS += tools/carmy-bench
tools_carmy_bench_SOURCES = tools/carmy-bench.c \
	tools/bench_run.h tools/bench_run.c \
	tools/bench_floor.h tools/bench_floor.c \
	tools/bench_peer.h tools/bench_peer.c
tools_carmy_bench_CFLAGS = $(AM_CFLAGS) $(URCU_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
tools_carmy_bench_LDADD = libclient/libcarmy.la $(MSGPACK_LIBS) $(XXHASH_LIBS)
if HAVE_HIREDIS
tools_carmy_bench_SOURCES += tools/bench_redis.c
tools_carmy_bench_CFLAGS += $(HIREDIS_CFLAGS)
tools_carmy_bench_LDADD += $(HIREDIS_LIBS)
CARMY_BENCH_REDIS = yes
else
CARMY_BENCH_REDIS = no
endif
if HAVE_LIBPQ
tools_carmy_bench_SOURCES += tools/bench_pg.c
tools_carmy_bench_CFLAGS += $(LIBPQ_CFLAGS)
tools_carmy_bench_LDADD += $(LIBPQ_LIBS)
CARMY_BENCH_PG = yes
else
CARMY_BENCH_PG = no
endif
EXTRA_DIST += tools/bench_make.sh

# make bench: carmy-bench against a throwaway carmyd, redis-server and
# PostgreSQL cluster (temp sockets; a table big enough for the run), stopped
# by a trap whatever happens; see tools/bench_make.sh. Not part of make
# check: figures are quoted, never asserted. PostgreSQL gets fewer ops: each
# of its writes waits for an fsync, and its medians settle long before.
CARMY_BENCH_OPS = 200000
CARMY_BENCH_PG_OPS = 20000
CARMY_BENCH_PROCS = 1,2
# Rounds of every figure (carmy-bench --rounds): each round Carmy's figures
# and then the peers', the round with the median ops/s quoted and the
# median of the rounds' ratios. Each round's cycles stay in carmyd's table:
# here about 1.1 GiB of segment per round.
CARMY_BENCH_ROUNDS = 1
# Options for the benchmarked carmyd, e.g. make bench CARMYD_ARGS='--spin-us 0'.
CARMYD_ARGS =
.PHONY: bench
bench: all
	CARMYD_ARGS='$(CARMYD_ARGS)' bash $(top_srcdir)/tools/bench_make.sh $(builddir) \
		$(CARMY_BENCH_OPS) $(CARMY_BENCH_PROCS) $(CARMY_BENCH_PG_OPS) \
		$(CARMY_BENCH_REDIS) $(CARMY_BENCH_PG) memory $(CARMY_BENCH_ROUNDS)

# make bench-journal: the durable store against the durable peer. A carmyd
# with --store journal:DIR and PostgreSQL (synchronous_commit on), both on
# this machine's one disk, run the reserve + complete cycle with 1 to 64
# client processes: every step waits for a flush in both, so what differs
# is how many clients one flush serves.
CARMY_BENCH_JOURNAL_OPS = 2000
CARMY_BENCH_JOURNAL_PROCS = 1,4,16,64
# Five rounds: a flush's cost and this machine's load both wander, and one
# round of each side can land on different moments of them.
CARMY_BENCH_JOURNAL_ROUNDS = 5
.PHONY: bench-journal
bench-journal: all
	CARMYD_ARGS='$(CARMYD_ARGS)' bash $(top_srcdir)/tools/bench_make.sh $(builddir) \
		$(CARMY_BENCH_JOURNAL_OPS) $(CARMY_BENCH_JOURNAL_PROCS) \
		$(CARMY_BENCH_JOURNAL_OPS) no $(CARMY_BENCH_PG) journal \
		$(CARMY_BENCH_JOURNAL_ROUNDS)

# make bench-restart: a journal carmyd with a million completed executions
# restarted on a new segment (a reboot), with the page cache dropped (as
# root) and warm; see tools/bench_restart.sh. The goal is 2 s or less.
CARMY_BENCH_RESTART_ENTRIES = 1000000
.PHONY: bench-restart
bench-restart: all
	bash $(top_srcdir)/tools/bench_restart.sh $(builddir) \
		$(CARMY_BENCH_RESTART_ENTRIES)
EXTRA_DIST += tools/bench_restart.sh

# make bench-shared: the same cycle through a carmyd whose store is
# PostgreSQL itself (the PostgreSQL store, as one of several instances
# would run), against PostgreSQL alone on the same cluster.
.PHONY: bench-shared
bench-shared: all
	CARMYD_ARGS='$(CARMYD_ARGS)' bash $(top_srcdir)/tools/bench_make.sh $(builddir) \
		$(CARMY_BENCH_JOURNAL_OPS) $(CARMY_BENCH_JOURNAL_PROCS) \
		$(CARMY_BENCH_JOURNAL_OPS) no $(CARMY_BENCH_PG) pg \
		$(CARMY_BENCH_JOURNAL_ROUNDS)
