# bench/: carmy-bench, its peers, and the make targets that run them.

# carmy-bench: measures a running carmyd against this machine's floors and,
# when built with hiredis and libpq, against Redis and PostgreSQL.
bin_PROGRAMS += bench/carmy-bench
bench_carmy_bench_SOURCES = bench/carmy-bench.c \
	bench/bench_run.h bench/bench_run.c \
	bench/bench_floor.h bench/bench_floor.c \
	bench/bench_machine.h bench/bench_machine.c \
	bench/bench_peer.h bench/bench_peer.c
bench_carmy_bench_CFLAGS = $(AM_CFLAGS) $(URCU_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
bench_carmy_bench_LDADD = libclient/libcarmy.la shm/libshm.la common/libcommon.la $(MSGPACK_LIBS) $(XXHASH_LIBS)
if HAVE_HIREDIS
bench_carmy_bench_SOURCES += bench/bench_redis.c
bench_carmy_bench_CFLAGS += $(HIREDIS_CFLAGS)
bench_carmy_bench_LDADD += $(HIREDIS_LIBS)
CARMY_BENCH_REDIS = yes
else
CARMY_BENCH_REDIS = no
endif
if HAVE_LIBPQ
bench_carmy_bench_SOURCES += bench/bench_pg.c
bench_carmy_bench_CFLAGS += $(LIBPQ_CFLAGS)
bench_carmy_bench_LDADD += $(LIBPQ_LIBS)
CARMY_BENCH_PG = yes
else
CARMY_BENCH_PG = no
endif
EXTRA_DIST += bench/bench_make.sh bench/bench_lib.sh bench/bench_ab.sh

# carmy-stall: the longest calls to a running carmyd, one client's, back
# to back (make bench-stall).
noinst_PROGRAMS += bench/carmy-stall
bench_carmy_stall_SOURCES = bench/carmy-stall.c
bench_carmy_stall_LDADD = libclient/libcarmy.la

# make bench-stall: carmy-stall against a throwaway carmyd with a table of
# millions of entries, once it has read its segment in: how long its event
# loop holds calls up while its tick walks the table; see
# bench/bench_stall.sh.
CARMY_STALL_CAPACITY = 3000000
CARMY_STALL_SECONDS = 5
# Each round keeps about a million completed calls: two fit the table.
CARMY_STALL_ROUNDS = 2
.PHONY: bench-stall
bench-stall: all
	bash $(top_srcdir)/bench/bench_stall.sh $(builddir) \
		$(CARMY_STALL_CAPACITY) $(CARMY_STALL_SECONDS) \
		$(CARMY_STALL_ROUNDS)
EXTRA_DIST += bench/bench_stall.sh

# make bench: carmy-bench against a throwaway carmyd, redis-server and
# PostgreSQL cluster (temp sockets; a table big enough for the run), stopped
# by a trap whatever happens; see bench/bench_make.sh. Not part of make
# check: figures are quoted, never asserted. The peers get fewer ops: each
# of PostgreSQL's writes waits for an fsync, a Redis round trip takes tens
# of microseconds, and their medians settle long before.
CARMY_BENCH_OPS = 100000
CARMY_BENCH_REDIS_OPS = 20000
CARMY_BENCH_PG_OPS = 4000
CARMY_BENCH_PROCS = 1,2
# Rounds of every figure (carmy-bench --rounds): each round Carmy's figures
# and then the peers', the round with the median ops/s quoted and the
# median of the rounds' ratios. Five, because this kind of machine's CPU
# runs at about 60% of its pace at times, for up to a tenth of a second,
# longer than one of Carmy's figures takes (docs/performance.md, "The
# CPU's two paces"). Each round's cycles stay in carmyd's table: here
# about 0.65 GiB of segment per round.
CARMY_BENCH_ROUNDS = 5
# Options for the benchmarked carmyd, e.g. make bench CARMYD_ARGS='--spin-us 0'.
CARMYD_ARGS =
.PHONY: bench
bench: all
	CARMYD_ARGS='$(CARMYD_ARGS)' bash $(top_srcdir)/bench/bench_make.sh $(builddir) \
		$(CARMY_BENCH_OPS) $(CARMY_BENCH_PROCS) $(CARMY_BENCH_PG_OPS) \
		$(CARMY_BENCH_REDIS) $(CARMY_BENCH_PG) memory $(CARMY_BENCH_ROUNDS) \
		$(CARMY_BENCH_REDIS_OPS)

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
	CARMYD_ARGS='$(CARMYD_ARGS)' bash $(top_srcdir)/bench/bench_make.sh $(builddir) \
		$(CARMY_BENCH_JOURNAL_OPS) $(CARMY_BENCH_JOURNAL_PROCS) \
		$(CARMY_BENCH_JOURNAL_OPS) no $(CARMY_BENCH_PG) journal \
		$(CARMY_BENCH_JOURNAL_ROUNDS)

# make bench-restart: a journal carmyd with a million completed executions
# restarted on a new segment (a reboot), with the page cache dropped (as
# root) and warm; see bench/bench_restart.sh. The goal is 2 s or less.
CARMY_BENCH_RESTART_ENTRIES = 1000000
.PHONY: bench-restart
bench-restart: all
	bash $(top_srcdir)/bench/bench_restart.sh $(builddir) \
		$(CARMY_BENCH_RESTART_ENTRIES)
EXTRA_DIST += bench/bench_restart.sh

# make bench-shared: the same cycle through a carmyd whose store is
# PostgreSQL itself (the PostgreSQL store, as one of several instances
# would run), against PostgreSQL alone on the same cluster.
# PG_STORE_ARGS: the store's arguments, e.g. PG_STORE_ARGS=connections=4.
.PHONY: bench-shared
bench-shared: all
	CARMYD_ARGS='$(CARMYD_ARGS)' PG_STORE_ARGS='$(PG_STORE_ARGS)' \
	bash $(top_srcdir)/bench/bench_make.sh $(builddir) \
		$(CARMY_BENCH_JOURNAL_OPS) $(CARMY_BENCH_JOURNAL_PROCS) \
		$(CARMY_BENCH_JOURNAL_OPS) no $(CARMY_BENCH_PG) pg \
		$(CARMY_BENCH_JOURNAL_ROUNDS)

# make bench-http: carmy-gateway against a bare libmicrohttpd server (the
# floor, bench-http-floor) and Express 5 + express-idempotency, with wrk;
# see bench/bench_http.sh. Rounds of every figure, each side's median and
# the median of the rounds' ratios.
noinst_PROGRAMS += bench/bench-http-floor
bench_bench_http_floor_SOURCES = bench/bench_http_floor.c
bench_bench_http_floor_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS) -pthread
bench_bench_http_floor_LDADD = $(MHD_LIBS) -lpthread
EXTRA_DIST += bench/bench_http.sh bench/bench_express.js
CARMY_BENCH_HTTP_SECONDS = 10
CARMY_BENCH_HTTP_ROUNDS = 5
.PHONY: bench-http
bench-http: all
	bash $(top_srcdir)/bench/bench_http.sh $(abs_top_builddir) \
		$(abs_top_srcdir) $(CARMY_BENCH_HTTP_SECONDS) \
		$(CARMY_BENCH_HTTP_ROUNDS)

# make bench-ab BASE=DIR: this build against the build in DIR (say a
# worktree of main), the cycle in short slices that take turns on one store;
# see bench/bench_ab.sh. A change of a few percent shows in the sign count
# of the pairs where two whole benchmark runs only show the machine's drift.
# BASE=. with BASE_CARMYD_ARGS or BASE_PG_STORE_ARGS compares two settings.
CARMY_AB_STORE = pg
CARMY_AB_PROCS = 1
CARMY_AB_OPS = 1500
CARMY_AB_PAIRS = 20
.PHONY: bench-ab
bench-ab: all
	@if test -z '$(BASE)'; then \
		echo 'make bench-ab: set BASE to the build directory to compare with, e.g. make bench-ab BASE=../main/_build' >&2; \
		exit 2; \
	fi
	CARMYD_ARGS='$(CARMYD_ARGS)' PG_STORE_ARGS='$(PG_STORE_ARGS)' \
	bash $(top_srcdir)/bench/bench_ab.sh '$(BASE)' $(builddir) \
		$(CARMY_AB_STORE) $(CARMY_AB_PROCS) $(CARMY_AB_OPS) $(CARMY_AB_PAIRS)
