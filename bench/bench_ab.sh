#!/usr/bin/env bash
# make bench-ab: this build against another (BASE), on the reserve +
# complete cycle, in short slices that take turns on one store. A small
# change moves a figure by a few percent; on a shared VM the machine moves
# it by more between two runs of a few minutes each (a flush's cost, the
# neighbours' load). Slices of a few seconds, base and this build in turn
# and the order swapped every other pair, see the same moments of the
# machine, and the sign of each pair's ratio counts even when the figures
# wander. Figures are quoted, never asserted: this is not part of make check.
#
#   bench_ab.sh BASE_BUILDDIR BUILDDIR STORE PROCS OPS PAIRS
#
# STORE is memory, journal or pg. With pg, one throwaway PostgreSQL cluster
# serves every slice, each through its own instance name. Each slice starts
# a fresh carmyd of its build (a fresh journal directory with journal) and
# runs that build's carmy-bench (its libcarmy is part of what is measured)
# with PROCS processes and OPS cycles each. CARMYD_ARGS adds options to both
# carmyds, PG_STORE_ARGS to both PostgreSQL stores' arguments;
# BASE_CARMYD_ARGS and BASE_PG_STORE_ARGS, when set, take their place on the
# base side: with BASE the same build, two settings are compared.
#
# Prints each pair (cycles a second, this/base) and then the medians, the
# median of the pairs' ratios and in how many pairs this build was faster.
set -u
base=$1 this=$2 store=$3 procs=$4 ops=$5 pairs=$6

case $store in
memory | journal | pg) ;;
*)
	echo "make bench-ab: store must be memory, journal or pg, not '$store'" >&2
	exit 2
	;;
esac
for b in "$base" "$this"; do
	if [ ! -x "$b/daemon/carmyd" ] || [ ! -x "$b/bench/carmy-bench" ]; then
		echo "make bench-ab: $b is not a built Carmy tree (daemon/carmyd, bench/carmy-bench)" >&2
		exit 2
	fi
done
# Absolute: carmyd loads a store plugin only from an absolute path, and
# make passes "." for this build's directory.
base=$(cd "$base" && pwd) && this=$(cd "$this" && pwd) || exit 2
case $procs$ops$pairs in
*[!0-9]* | '')
	echo "make bench-ab: PROCS, OPS and PAIRS are counts" >&2
	exit 2
	;;
esac
if [ "$procs" -lt 1 ] || [ "$ops" -lt 1 ] || [ "$pairs" -lt 1 ]; then
	echo "make bench-ab: PROCS, OPS and PAIRS must be at least 1" >&2
	exit 2
fi

. "$(dirname "$0")/bench_lib.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/carmy-bench-ab.XXXXXX") || exit 1
pg_conninfo=
trap bench_cleanup EXIT
trap 'exit 130' HUP INT TERM

this_cargs=${CARMYD_ARGS:-} this_pargs=${PG_STORE_ARGS:-}
base_cargs=${BASE_CARMYD_ARGS-$this_cargs}
base_pargs=${BASE_PG_STORE_ARGS-$this_pargs}
echo "base: $base${base_cargs:+ (carmyd $base_cargs)}${base_pargs:+ (store $base_pargs)}"
echo "this: $this${this_cargs:+ (carmyd $this_cargs)}${this_pargs:+ (store $this_pargs)}"
echo "store $store, $procs processes x $ops cycles a slice, $pairs pairs"
if [ "$store" = pg ]; then
	for b in "$base" "$this"; do
		if [ ! -r "$b/stores/pg/.libs/carmy_store_pg.so" ]; then
			echo "make bench-ab: $b has no PostgreSQL store (built without libpq?)" >&2
			exit 1
		fi
	done
	pg_start "make bench-ab: " || exit 1
fi

# slice NAME BUILDDIR CARMYD_ARGS PG_STORE_ARGS: one fresh carmyd of
# BUILDDIR and its carmy-bench; sets fig to the cycles a second (empty if
# none came), the rest goes to the log.
slice() {
	local name=$1 b=$2 cargs=$3 pargs=$4 args=()

	fig=
	case $store in
	journal) args=(--store "journal:$tmp/journal.$name") ;;
	pg) args=(--store "plugin:$b/stores/pg/.libs/carmy_store_pg.so:instance=ab$$.$name ${pargs:+$pargs }$pg_conninfo") ;;
	esac
	carmyd_start "$b" $((procs * ops + 1000)) "${args[@]}" $cargs \
		>>"$tmp/log" || return 1
	"$b/bench/carmy-bench" --socket "$tmp/carmyd.sock" --only cycle \
		--procs "$procs" --ops "$ops" --json >"$tmp/json" 2>>"$tmp/log"
	carmyd_stop
	rm -rf "$tmp/journal.$name"
	fig=$(sed -n 's/.*"figure":"cycle"[^}]*"ops_per_s":\([0-9][0-9]*\).*/\1/p' "$tmp/json")
	[ -n "$fig" ]
}

for ((i = 1; i <= pairs; i++)); do
	ok=0
	if ((i % 2)); then
		slice "$i.base" "$base" "$base_cargs" "$base_pargs" && a=$fig &&
			slice "$i.this" "$this" "$this_cargs" "$this_pargs" && t=$fig && ok=1
	else
		slice "$i.this" "$this" "$this_cargs" "$this_pargs" && t=$fig &&
			slice "$i.base" "$base" "$base_cargs" "$base_pargs" && a=$fig && ok=1
	fi
	if [ "$ok" -ne 1 ]; then
		echo "make bench-ab: pair $i did not give a figure:" >&2
		cat "$tmp/log" "$tmp/carmyd.log" >&2
		exit 1
	fi
	echo "$i $a $t" >>"$tmp/figures"
	awk -v i="$i" -v a="$a" -v t="$t" 'BEGIN {
		printf "pair %3d: base %8d  this %8d cycles/s  this/base %.3f\n", i, a, t, t / a
	}'
done
awk "$awk_median"'
{ n++; a[n] = $2; t[n] = $3; r[n] = $3 / $2; faster += $3 > $2 }
END {
	printf "medians: base %.0f, this %.0f cycles/s; median of the pairs'"'"' this/base %.3f; this faster in %d of %d pairs\n",
		median(a, n), median(t, n), median(r, n), faster, n
}' "$tmp/figures"
