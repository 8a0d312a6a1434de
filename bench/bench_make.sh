#!/usr/bin/env bash
# make bench: carmy-bench against a throwaway carmyd and, in the same run,
# a throwaway redis-server and PostgreSQL cluster, all on Unix sockets in one
# temp directory, all stopped by the trap whatever happens. Figures are
# quoted, never asserted: this is not part of make check.
#
#   bench_make.sh BUILDDIR OPS PROCS PG_OPS REDIS_BUILT PG_BUILT \
#                 [memory|journal|pg] [ROUNDS] [REDIS_OPS]
#
# OPS is per process and figure (PG_OPS for PostgreSQL, whose every write
# waits for an fsync, REDIS_OPS for Redis, default OPS, whose round trips
# take tens of microseconds where Carmy's figures take one or less); PROCS
# a comma-separated list; *_BUILT yes or no, from
# configure. With "journal", carmyd records into a journal in the temp
# directory (--store journal:DIR, on the same disk as PostgreSQL's data)
# and only the reserve + complete cycle is measured: the durable against
# the durable. With "pg", carmyd records into the same PostgreSQL through
# the PostgreSQL store (stores/pg/), as one instance of several would, and
# again only the cycle is measured. With either, carmy-bench times a flush
# to the temp directory's disk first (--disk), on which every commit of
# both waits. A store that is not installed, or that
# this carmy-bench was built without, is skipped with a word saying so. ROUNDS (default 1) is carmy-bench's --rounds: every
# figure that many times, Carmy's and then the peers' in each round, and
# the median round quoted. PG_BINDIR overrides where PostgreSQL's server
# programs are found. CARMYD_ARGS adds options to carmyd's command line
# (split on blanks), e.g. CARMYD_ARGS='--spin-us 0'; PG_STORE_ARGS to the
# PostgreSQL store's arguments, before the connection string, e.g.
# PG_STORE_ARGS='connections=8'.
set -u
builddir=$1 ops=$2 procs=$3 pg_ops=$4 redis_built=$5 pg_built=$6
store=${7:-memory} rounds=${8:-1} redis_ops=${9:-$2}
# Absolute: carmyd loads a store plugin only from an absolute path, and
# make passes "." for the build directory.
builddir=$(cd "$builddir" && pwd) || exit 1

. "$(dirname "$0")/bench_lib.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/carmy-bench.XXXXXX") || exit 1
peers=() pg_conninfo=
trap bench_cleanup EXIT
trap 'exit 130' HUP INT TERM

if [ "$pg_built" != yes ]; then
	echo "make bench: skipping PostgreSQL: carmy-bench was built without libpq"
elif pg_start "make bench: skipping PostgreSQL: "; then
	peers+=(--pg "$pg_conninfo" --pg-ops "$pg_ops")
fi

# carmyd: a table big enough for the run; its ready line is the event.
# Every run here has the cycle figure, which keeps ops entries per process
# and round, and reserve's peak (its entries are given back) comes while
# fewer are kept; 10,000 more hold the replay set. Each entry costs the
# segment about 1.9 KiB with --max-result 1K: five rounds of
# bench-journal's 2,000 x (1 + 4 + 16 + 64) cycles map 1.6 GiB.
sum=0
for p in ${procs//,/ }; do
	sum=$((sum + p))
done
cap=$((ops * sum * rounds + 10000))
store_args=() only=() disk=()
if [ "$store" = journal ]; then
	store_args=(--store "journal:$tmp/journal")
	only=(--only msgpack-rt,cycle) disk=(--disk "$tmp")
elif [ "$store" = pg ]; then
	plugin=$builddir/stores/pg/.libs/carmy_store_pg.so
	if [ -z "$pg_conninfo" ] || [ ! -r "$plugin" ]; then
		echo "make bench-shared: needs PostgreSQL running and $plugin (libpq)" >&2
		exit 1
	fi
	store_args=(--store "plugin:$plugin:instance=bench ${PG_STORE_ARGS:+$PG_STORE_ARGS }$pg_conninfo")
	only=(--only msgpack-rt,cycle) disk=(--disk "$tmp")
fi
carmyd_start "$builddir" "$cap" "${store_args[@]}" ${CARMYD_ARGS:-} || exit 1

# Redis, persistence off: Carmy's table lives in memory (it outlives
# carmyd, not the machine) and writes nothing to disk on any path, so the
# Redis that matches it keeps nothing on disk either. This is also the
# fastest Redis: no AOF write per SET, no snapshot fork in the middle of
# the run (the built-in default would snapshot every 60 s under this load).
if [ "$store" != memory ]; then
	echo "make bench: Redis left out: with persistence off it is no durable store"
elif [ "$redis_built" != yes ]; then
	echo "make bench: skipping Redis: carmy-bench was built without hiredis"
elif ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
	echo "make bench: skipping Redis: redis-server or redis-cli is not installed"
else
	redis-server --port 0 --unixsocket "$tmp/redis.sock" \
		--unixsocketperm 700 --save '' --appendonly no \
		--dir "$tmp" --daemonize no >"$tmp/redis.log" 2>&1 &
	redis_pid=$!
	if wait_ready "$redis_pid" 20 redis-cli -s "$tmp/redis.sock" ping; then
		echo "redis-server ready socket=$tmp/redis.sock pid=$redis_pid"
		peers+=(--redis "$tmp/redis.sock" --redis-ops "$redis_ops")
	else
		echo "make bench: skipping Redis: redis-server did not start:" >&2
		cat "$tmp/redis.log" >&2
	fi
fi

"$builddir/bench/carmy-bench" --socket "$tmp/carmyd.sock" \
	--procs "$procs" --ops "$ops" --rounds "$rounds" "${only[@]}" \
	"${disk[@]}" "${peers[@]}"
exit $?
