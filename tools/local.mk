# tools/: programs people run.

# carmy-run: wraps a command with idempotency.
bin_PROGRAMS += tools/carmy-run
tools_carmy_run_SOURCES = tools/carmy-run.c tools/json.h tools/json.c
tools_carmy_run_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS)
tools_carmy_run_LDADD = libclient/libcarmy.la $(MSGPACK_LIBS)

# carmy-bench: measures a running carmyd against this machine's floors.
bin_PROGRAMS += tools/carmy-bench
tools_carmy_bench_SOURCES = tools/carmy-bench.c \
	tools/bench_run.h tools/bench_run.c \
	tools/bench_floor.h tools/bench_floor.c
tools_carmy_bench_CFLAGS = $(AM_CFLAGS) $(URCU_CFLAGS) $(MSGPACK_CFLAGS) $(XXHASH_CFLAGS)
tools_carmy_bench_LDADD = libclient/libcarmy.la $(MSGPACK_LIBS) $(XXHASH_LIBS)

# make bench: a throwaway carmyd (temp socket, a table big enough for the
# run) measured by carmy-bench, stopped by a trap whatever happens. Not part
# of make check: figures are quoted, never asserted.
CARMY_BENCH_OPS = 200000
CARMY_BENCH_PROCS = 1,2
.PHONY: bench
bench: all
	@tmp=`mktemp -d "$${TMPDIR:-/tmp}/carmy-bench.XXXXXX"` || exit 1; \
	pid=; \
	trap 'test -z "$$pid" || { kill $$pid 2>/dev/null; wait $$pid 2>/dev/null; }; rm -rf "$$tmp"' EXIT; \
	trap 'exit 130' HUP INT TERM; \
	sum=0; max=0; \
	for p in `echo '$(CARMY_BENCH_PROCS)' | tr , ' '`; do \
		sum=$$((sum + p)); test $$p -le $$max || max=$$p; \
	done; \
	cap=$$(( $(CARMY_BENCH_OPS) * (sum + max) + 10000 )); \
	mkfifo "$$tmp/ready" || exit 1; \
	$(builddir)/daemon/carmyd --foreground --transient \
		--socket "$$tmp/carmyd.sock" --capacity $$cap --max-result 1K \
		>"$$tmp/ready" 2>"$$tmp/carmyd.log" & pid=$$!; \
	exec 3<"$$tmp/ready"; \
	if ! read -r line <&3; then \
		echo "make bench: carmyd did not start:" >&2; \
		cat "$$tmp/carmyd.log" >&2; exit 1; \
	fi; \
	echo "$$line"; \
	$(builddir)/tools/carmy-bench --socket "$$tmp/carmyd.sock" \
		--procs $(CARMY_BENCH_PROCS) --ops $(CARMY_BENCH_OPS); \
	rc=$$?; exit $$rc
