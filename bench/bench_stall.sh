#!/usr/bin/env bash
# make bench-stall: how long a carmyd with a big table holds one client's
# calls up, the longest of them, while its event loop does the work of its
# 100 ms tick (the walks of the table, the reclaim of tombstones).
#
#   bench_stall.sh BUILDDIR CAPACITY SECONDS [ROUNDS]
#
# A throwaway carmyd with CAPACITY entries (--max-result 128), once it has
# read its segment in; then, ROUNDS times (default 2), carmy-stall for
# SECONDS with calls completed (the table fills) and for SECONDS with
# calls released (each leaves a tombstone to reclaim). Each run's line is
# printed: the calls, the longest, and how many took over 0.1, 1 and 5 ms.
# The figures are quoted, never asserted: this is not part of make check.
set -u
builddir=$1 cap=$2 seconds=$3 rounds=${4:-2}
builddir=$(cd "$builddir" && pwd) || exit 1

. "$(dirname "$0")/bench_lib.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/carmy-stall.XXXXXX") || exit 1
peers=() pg_conninfo=
trap bench_cleanup EXIT
trap 'exit 130' HUP INT TERM

# Every completed call stays in the table: a round completes about a
# million calls in 5 s on this project's VMs (a table that fills ends that
# round's run early, and carmy-stall says so). Small results keep the
# segment near 1.4 KiB an entry.
carmyd_start "$builddir" "$cap" --max-result 128 || exit 1
stall=$builddir/bench/carmy-stall
for r in $(seq 1 "$rounds"); do
	for mode in complete release; do
		args=(--socket "$tmp/carmyd.sock" --seconds "$seconds")
		[ "$mode" = release ] && args+=(--release)
		printf 'round %s: ' "$r"
		"$stall" "${args[@]}" || exit 1
	done
done
