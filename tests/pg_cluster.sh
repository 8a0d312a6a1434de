# tests/pg_cluster.sh - a throwaway PostgreSQL cluster for a test, sourced
# by bash:
#
#   . "$CARMY_SRCDIR/tests/pg_cluster.sh"
#   pg_cluster_test PROGRAM [ARGS]   # a whole test: see the end
# or, by hand:
#   trap pg_cluster_stop EXIT
#   pg_cluster_start; rc=$?      # 0 up, 77 no server installed, 1 failed
#
# Once up, PG_CONNINFO ("host=DIR user=carmy dbname=postgres") is exported.
# The cluster lives in its own temp directory and listens on a Unix socket
# there, nothing else; fsync stays on, as in production. PG_BINDIR names
# where the server programs are; otherwise the newest
# /usr/lib/postgresql/*/bin (Debian), then initdb on PATH. 77 means none
# was found (PG_CLUSTER_WHY says so): a caller may skip then, and only
# then. Programs found that do not bring a cluster up are a failure, with
# the server's log on stderr: CI installs PostgreSQL (scripts/deps.sh), and
# a skip there would hide a broken store.
#
# PostgreSQL refuses to run as root: as root, initdb and postgres run as
# nobody (setpriv), in a directory nobody owns, whose parent is opened for
# traversal (as bench/bench_make.sh does).

pg_cluster_tmp=
pg_cluster_pid=
pg_cluster_as=()
pg_cluster_bin=
pg_cluster_tick_fd=
PG_CLUSTER_WHY=

# The server programs' directory, or nothing.
pg_cluster_bindir()
{
	local d best=

	if [[ -n ${PG_BINDIR:-} ]]; then
		[[ -x $PG_BINDIR/postgres ]] && echo "$PG_BINDIR"
		return 0
	fi
	for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V); do
		[[ -x $d/postgres && -x $d/initdb ]] && best=$d
	done
	if [[ -z $best ]] && command -v initdb >/dev/null &&
		command -v postgres >/dev/null; then
		best=$(dirname "$(command -v initdb)")
	fi
	[[ -n $best ]] && echo "$best"
	return 0
}

# Wait up to $1 seconds without a sleep process: a read with a timeout on
# a FIFO nobody writes.
pg_cluster_tick()
{
	read -r -t "$1" -u "$pg_cluster_tick_fd" _ 2>/dev/null
	return 0
}

pg_cluster_fail()
{
	echo "pg_cluster: $*" >&2
	if [[ -f $pg_cluster_tmp/pg.log ]]; then
		echo "pg_cluster: its log:" >&2
		sed 's/^/  | /' "$pg_cluster_tmp/pg.log" >&2
	fi
	return 1
}

pg_cluster_start()
{
	local bindir as=() dir end

	bindir=$(pg_cluster_bindir)
	if [[ -z $bindir ]]; then
		PG_CLUSTER_WHY="no PostgreSQL server found (set PG_BINDIR)"
		return 77
	fi
	pg_cluster_tmp=$(mktemp -d "${TMPDIR:-/tmp}/carmy-pg.XXXXXX") ||
		return 1
	mkfifo "$pg_cluster_tmp/tick" &&
		exec {pg_cluster_tick_fd}<>"$pg_cluster_tmp/tick" || return 1
	dir=$pg_cluster_tmp/pg
	mkdir "$dir" || return 1
	if [[ $(id -u) -eq 0 ]]; then
		as=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
		chown nobody:nogroup "$dir" && chmod 711 "$pg_cluster_tmp" ||
			return 1
		"${as[@]}" test -x "$dir" ||
			pg_cluster_fail "nobody cannot reach $dir: set TMPDIR" \
				"to a directory every user can traverse" ||
			return 1
	fi
	# initdb's own files need no fsync: the cluster is thrown away.
	if ! (cd "$dir" && "${as[@]}" "$bindir/initdb" -D "$dir/data" \
		-U carmy --auth=trust -E UTF8 --locale=C --no-sync) \
		>"$pg_cluster_tmp/pg.log" 2>&1; then
		pg_cluster_fail "initdb ($bindir) failed"
		return 1
	fi
	pg_cluster_as=("${as[@]}")
	pg_cluster_bin=$bindir
	pg_cluster_run || return 1
	export PG_CONNINFO="host=$dir user=carmy dbname=postgres"
	return 0
}

# pg_cluster_run: start the server on the cluster made by pg_cluster_start
# and return once it accepts connections (60 s at most).
pg_cluster_run()
{
	local dir=$pg_cluster_tmp/pg end

	(cd "$dir" && exec "${pg_cluster_as[@]}" "$pg_cluster_bin/postgres" \
		-D "$dir/data" -c listen_addresses= \
		-c unix_socket_directories="$dir") \
		>>"$pg_cluster_tmp/pg.log" 2>&1 &
	pg_cluster_pid=$!
	end=$((SECONDS + 60))
	until "$pg_cluster_bin/pg_isready" -q -h "$dir" -U carmy -d postgres; do
		if ! kill -0 "$pg_cluster_pid" 2>/dev/null; then
			wait "$pg_cluster_pid" 2>/dev/null
			pg_cluster_pid=
			pg_cluster_fail "postgres ($pg_cluster_bin) exited at start"
			return 1
		fi
		if ((SECONDS >= end)); then
			pg_cluster_fail "postgres ($pg_cluster_bin) not ready in 60 s"
			return 1
		fi
		pg_cluster_tick 0.05
	done
	return 0
}

# pg_cluster_crash: what `pg_ctl restart -m immediate` does. The postmaster
# gets SIGQUIT and its backends quit at once, with no checkpoint and
# transactions in flight cut off; then a new server starts on the same
# data and recovers it from the WAL. Returns once it accepts connections.
pg_cluster_crash()
{
	kill -QUIT "$pg_cluster_pid" 2>/dev/null
	wait "$pg_cluster_pid" 2>/dev/null
	pg_cluster_pid=
	pg_cluster_run
}

# pg_cluster_freeze / pg_cluster_thaw: SIGSTOP (SIGCONT) the postmaster and
# every process it started: a server that stops answering without closing
# a connection, and queues new ones unanswered.
pg_cluster_freeze()
{
	kill -STOP "$pg_cluster_pid" $(pgrep -P "$pg_cluster_pid") 2>/dev/null
}

pg_cluster_thaw()
{
	kill -CONT $(pgrep -P "$pg_cluster_pid") "$pg_cluster_pid" 2>/dev/null
}

# Fast shutdown (SIGINT), 30 s to go, then SIGKILL; the directory goes.
# Safe to call twice, and before or after a failed start.
pg_cluster_stop()
{
	local i

	if [[ -n $pg_cluster_pid ]]; then
		pg_cluster_thaw	# a test that failed while it was frozen
		kill -INT "$pg_cluster_pid" 2>/dev/null
		for ((i = 0; i < 600; i++)); do
			kill -0 "$pg_cluster_pid" 2>/dev/null || break
			pg_cluster_tick 0.05
		done
		kill -KILL "$pg_cluster_pid" 2>/dev/null
		wait "$pg_cluster_pid" 2>/dev/null
		pg_cluster_pid=
	fi
	if [[ -n $pg_cluster_tick_fd ]]; then
		exec {pg_cluster_tick_fd}<&-
		pg_cluster_tick_fd=
	fi
	if [[ -n $pg_cluster_tmp ]]; then
		rm -rf "$pg_cluster_tmp"
		pg_cluster_tmp=
	fi
	return 0
}

# The whole of a test that needs PostgreSQL: start a cluster, run PROGRAM
# (a Check program; TAP on stdout) with PG_CONNINFO set, stop the cluster
# whatever happens, and return PROGRAM's status. Skipped (TAP 1..0) only
# when no server is installed; one that does not start bails out.
pg_cluster_test()
{
	local rc

	trap pg_cluster_stop EXIT
	trap 'exit 130' HUP INT TERM
	pg_cluster_start
	rc=$?
	if ((rc == 77)); then
		echo "1..0 # SKIP $PG_CLUSTER_WHY"
		return 0
	elif ((rc != 0)); then
		echo "Bail out! a PostgreSQL server is installed but its" \
			"cluster did not start (its log is above, on stderr)"
		return 99
	fi
	CK_TAP_LOG_FILE_NAME=${CK_TAP_LOG_FILE_NAME:--}
	export CK_TAP_LOG_FILE_NAME
	"$@"
}
