#!/usr/bin/env bash
# make bench-restart: how long a journal carmyd takes to come back after a
# reboot with N completed executions (the goal: a million in 2 s or less).
#
#   bench_restart.sh BUILDDIR N [ROUNDS]
#
# A throwaway carmyd with --store journal:DIR records N reserve + complete
# cycles (carmy-bench, 64 processes), and is stopped; with --transient its
# segment goes with it, as in a reboot. Then carmyd is started again on the
# same journal, from its exec to its ready line, ROUNDS times (default 3)
# after the page cache was dropped (only as root: the journal is read from
# the disk, as after a real reboot), and ROUNDS times with the journal in
# the page cache; each and the median are printed. The figures are
# quoted, never asserted: this is not part of make check.
set -u
builddir=$1 n=$2 rounds=${3:-3}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/carmy-restart.XXXXXX") || exit 1
segment=/carmy-restart.$$
carmyd_pid=
# --transient removes the segment on a clean exit only; a carmyd that
# crashed leaves it (over a GiB for a million entries).
cleanup() {
	[ -z "$carmyd_pid" ] || { kill -TERM "$carmyd_pid" 2>/dev/null; wait "$carmyd_pid"; }
	rm -f "/dev/shm$segment"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' HUP INT TERM

procs=64
ops=$(( (n + procs - 1) / procs ))
# Room for every cycle and a tenth more; small results (the benchmark's
# are 100 bytes) keep the segment near 1.4 KiB an entry.
args=(--foreground --transient --socket "$tmp/carmyd.sock"
	--segment "$segment" --capacity $(( n * 12 / 10 + 1000 ))
	--max-result 128 --store "journal:$tmp/journal")

# The program itself, not libtool's wrapper script around it in a build
# tree (its start would be timed too), with libcarmy where the wrapper
# would have found it.
carmyd=$builddir/daemon/carmyd
libpath=${LD_LIBRARY_PATH:-}
if [ -x "$builddir/daemon/.libs/carmyd" ]; then
	carmyd=$builddir/daemon/.libs/carmyd
	libpath=$builddir/libclient/.libs${libpath:+:$libpath}
fi

# start: carmyd in the background; returns once its ready line came, with
# the nanoseconds from just before its exec to that line in $took.
start() {
	local t0 line

	rm -f "$tmp/ready"
	mkfifo "$tmp/ready" || exit 1
	t0=$(date +%s%N)
	LD_LIBRARY_PATH=$libpath "$carmyd" "${args[@]}" >"$tmp/ready" \
		2>>"$tmp/carmyd.log" &
	carmyd_pid=$!
	if ! read -r line <"$tmp/ready"; then
		echo "make bench-restart: carmyd did not start:" >&2
		cat "$tmp/carmyd.log" >&2
		exit 1
	fi
	took=$(( $(date +%s%N) - t0 ))
}

# stop: a clean stop, which removes the segment; a restart after it must
# rebuild the table from the journal, as after a reboot.
stop() {
	kill -TERM "$carmyd_pid" && wait "$carmyd_pid"
	carmyd_pid=
	if [ -e "/dev/shm$segment" ]; then
		echo "make bench-restart: carmyd left its segment behind" >&2
		exit 1
	fi
}

# restored: the last start rebuilt the table from the journal.
restored() {
	grep 'store: ' "$tmp/carmyd.log" | tail -1 | grep -q 'store: restored ' || {
		echo "make bench-restart: carmyd did not restore the journal:" >&2
		tail -5 "$tmp/carmyd.log" >&2
		exit 1
	}
}

# completed: how many completed executions carmyd holds.
completed() {
	"$builddir/tools/carmyctl" --socket "$tmp/carmyd.sock" --json status |
		sed -n 's/.*"completed":\([0-9]*\).*/\1/p'
}

start
echo "make bench-restart: recording $n completed executions with $procs processes"
# A figure stops when its first process is done, the others a little
# behind it: run more until there are n.
have=0
while [ "$have" -lt "$n" ]; do
	ops=$(( (n - have + procs - 1) / procs ))
	"$builddir/bench/carmy-bench" --socket "$tmp/carmyd.sock" \
		--procs "$procs" --ops "$ops" --only cycle | grep -E '^cycle' ||
		exit 1
	have=$(completed)
	[ -n "$have" ] || exit 1
done
stop

# restarts KIND: ROUNDS timed restarts, each after drop (cold) or not
# (warm); prints each and their median.
restarts() {
	local kind=$1 times=() i what

	for ((i = 0; i < rounds; i++)); do
		if [ "$kind" = cold ]; then
			sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches || return 1
		fi
		start
		times+=("$took")
		stop
		restored
	done
	[ "$kind" = cold ] && what="page cache dropped" ||
		what="journal in the page cache"
	# Each in the order they ran; the median of them sorted.
	printf '%s\n' "${times[@]}" | awk -v what="$what" '
		{ each = each sprintf(" %.3f", $1 / 1e9) }
		END { printf "restart, %s:%s s; ", what, each }'
	printf '%s\n' "${times[@]}" | sort -n |
		awk '{ t[NR] = $1 } END { printf "median %.3f s\n", t[int((NR + 1) / 2)] / 1e9 }'
}

if [ "$(id -u)" -ne 0 ] || ! restarts cold; then
	echo "restart, page cache dropped: not measured (needs root, and a /proc/sys/vm/drop_caches that takes it)"
fi
restarts warm
# What the last start found: records read, executions standing, restored.
grep -oE 'journal [^ ]*: [0-9]+ records, .*|store: [a-z]+ [0-9]+ completed.*' \
	"$tmp/carmyd.log" | tail -2
