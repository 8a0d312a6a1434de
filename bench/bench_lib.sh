# Sourced by the bench scripts: a throwaway PostgreSQL cluster and carmyd
# in the caller's temp directory $tmp, the trap that stops them, and an awk
# median.

carmyd_pid= redis_pid= pg_pid=

# bench_cleanup, the caller's EXIT trap: stops whatever was started (SIGINT
# is PostgreSQL's fast shutdown; SIGTERM stops the others), waits for them
# and removes $tmp.
bench_cleanup() {
	local p

	for p in "$carmyd_pid" "$redis_pid"; do
		[ -z "$p" ] || kill -TERM "$p" 2>/dev/null
	done
	[ -z "$pg_pid" ] || kill -INT "$pg_pid" 2>/dev/null
	for p in "$carmyd_pid" "$redis_pid" "$pg_pid"; do
		[ -z "$p" ] || wait "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}

# An awk function for a program to start with: median(v, n) of v[1..n]
# (sorts v in place).
awk_median='
function median(v, n,    i, j, x) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && v[j - 1] > v[j]; j--) {
			x = v[j]; v[j] = v[j - 1]; v[j - 1] = x
		}
	return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}'

# Poll CHECK (a readiness probe of the event itself) until it succeeds, the
# process PID is gone, or SECONDS pass. Returns 0 once ready.
wait_ready() {
	local pid=$1 secs=$2 end
	shift 2
	end=$((SECONDS + secs))
	while ! "$@" >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || return 1
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.05
	done
}

# pg_bindir: where PostgreSQL's server programs are, $PG_BINDIR if set,
# else the last /usr/lib/postgresql/*/bin that has them; nothing if none.
pg_bindir() {
	local d bindir=${PG_BINDIR:-}

	if [ -z "$bindir" ]; then
		for d in /usr/lib/postgresql/*/bin; do
			[ -x "$d/postgres" ] && bindir=$d
		done
	fi
	if [ -n "$bindir" ] && [ -x "$bindir/postgres" ]; then
		echo "$bindir"
	fi
}

# PostgreSQL with the server's defaults (fsync on, synchronous_commit on),
# listening on a socket only, in $tmp/pg. It refuses to run as root: then
# the cluster belongs to nobody, and the temp directory is opened to it for
# traversal. PG_BINDIR overrides where the server programs are found.
# pg_start PREFIX: sets pg_pid and pg_conninfo; returns 1 when no cluster
# could be started, having said why on stderr after the caller's PREFIX.
pg_start() {
	local why=$1 as=() bindir

	bindir=$(pg_bindir)
	if [ -z "$bindir" ]; then
		echo "${why}no server found in /usr/lib/postgresql/*/bin (set PG_BINDIR)" >&2
		return 1
	fi
	if [ "$(id -u)" -eq 0 ]; then
		as=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
		mkdir -p "$tmp/pg" && chown nobody:nogroup "$tmp/pg" &&
			chmod 711 "$tmp"
	else
		mkdir -p "$tmp/pg"
	fi
	if ! (cd "$tmp/pg" && "${as[@]}" "$bindir/initdb" -D "$tmp/pg/data" \
		-U carmy --auth=trust -E UTF8 --locale=C) >"$tmp/pg.log" 2>&1; then
		echo "${why}initdb failed:" >&2
		cat "$tmp/pg.log" >&2
		return 1
	fi
	(cd "$tmp/pg" && exec "${as[@]}" "$bindir/postgres" \
		-D "$tmp/pg/data" -c listen_addresses= \
		-c unix_socket_directories="$tmp/pg") >>"$tmp/pg.log" 2>&1 &
	pg_pid=$!
	if ! wait_ready "$pg_pid" 60 "$bindir/pg_isready" -q -h "$tmp/pg" -U carmy; then
		echo "${why}postgres did not start:" >&2
		cat "$tmp/pg.log" >&2
		return 1
	fi
	echo "postgres ready socket=$tmp/pg pid=$pg_pid"
	pg_conninfo="host=$tmp/pg user=carmy dbname=postgres"
}

# carmyd_start BUILDDIR CAPACITY [CARMYD OPTIONS...]: a throwaway carmyd
# on $tmp/carmyd.sock (--max-result 1K), its ready line printed. Returns
# once its log says its new segment is zeroed (carmyd zeroes it on a thread
# of its own after it is ready: measured meanwhile, the first figures would
# share the CPUs with it). Sets carmyd_pid; returns 1 if it did not start.
carmyd_start() {
	local builddir=$1 cap=$2 line
	shift 2

	rm -f "$tmp/ready"
	mkfifo "$tmp/ready" || return 1
	"$builddir/daemon/carmyd" --foreground --transient \
		--socket "$tmp/carmyd.sock" --capacity "$cap" --max-result 1K \
		"$@" >"$tmp/ready" 2>"$tmp/carmyd.log" &
	carmyd_pid=$!
	exec 3<"$tmp/ready"
	if ! read -r line <&3; then
		exec 3<&-
		echo "carmyd did not start:" >&2
		cat "$tmp/carmyd.log" >&2
		return 1
	fi
	exec 3<&-
	echo "$line"
	if ! wait_ready "$carmyd_pid" 60 grep -q '^.* info: segment: ' "$tmp/carmyd.log"; then
		echo "carmyd did not say its segment is ready; measuring anyway" >&2
	fi
	grep -o 'segment: .*' "$tmp/carmyd.log"
}

# carmyd_stop: stops the carmyd carmyd_start started and waits for it.
carmyd_stop() {
	[ -z "$carmyd_pid" ] && return 0
	kill -TERM "$carmyd_pid" 2>/dev/null
	wait "$carmyd_pid" 2>/dev/null
	carmyd_pid=
}
