#!/usr/bin/env bash
# Quick start: install what is needed, build, start carmyd on its defaults
# and walk through the four outcomes of a call with carmy-run.
set -euo pipefail
cd "$(dirname "$0")/.."

# quiet WHAT COMMAND [ARG]...: run COMMAND with its output in a log, kept
# quiet when it succeeds; when it fails, say that WHAT failed, print the
# end of its output and where the rest is, and exit.
quiet() {
	local what=$1 log st=0
	shift
	log=$(mktemp /tmp/carmy-quickstart-log.XXXXXX)
	"$@" >"$log" 2>&1 || st=$?
	if [ "$st" -ne 0 ]; then
		{
			echo "quickstart: $what failed (exit $st); the end of" \
			     "its output:"
			tail -n 40 "$log"
			echo "quickstart: all of its output is in $log"
		} >&2
		exit 1
	fi
	rm -f "$log"
}

bash scripts/deps.sh --build
# Out of tree, in _build/, so that .ci/run (which builds under _ci/) works
# on the same checkout afterwards.
if [ -f config.status ]; then
	b=.	# already configured in place by hand: use that build
else
	b=_build
	if [ ! -f _build/config.status ]; then
		quiet "autoreconf -fi" autoreconf -fi
		mkdir -p _build
		quiet "./configure (in _build/)" \
			sh -c 'cd _build && exec ../configure'
	fi
fi
quiet "make -C $b" make -C "$b" -j"$(nproc)"

run=$b/tools/carmy-run
carmyd=$b/daemon/carmyd
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@" || printf '(exit %d)\n' "$?"; }

say "Starting carmyd on its defaults (it prints its ready line once clients can connect)"
tmp=$(mktemp -d /tmp/carmy-quickstart.XXXXXX)
mkfifo "$tmp/carmyd.out"
$carmyd --foreground > "$tmp/carmyd.out" 2> "$tmp/carmyd.err" &
carmyd_pid=$!
if line=$(timeout 30 head -n 1 "$tmp/carmyd.out") && [ -n "$line" ]; then
	echo "$line"
else
	kill -9 "$carmyd_pid" 2>/dev/null || true	# if it hangs instead
	wait "$carmyd_pid" 2>/dev/null || true
	cat "$tmp/carmyd.err" >&2
	if grep -q 'another carmyd is already serving' "$tmp/carmyd.err"; then
		echo "(a carmyd is already serving the default socket: using it)"
		carmyd_pid=
	else
		echo "quickstart: carmyd did not start; its reason is above" >&2
		rm -rf "$tmp"
		exit 1
	fi
fi
cleanup() {
	[ -n "${slow:-}" ] && kill -9 "$slow" 2>/dev/null || true
	[ -n "${carmyd_pid:-}" ] && kill -TERM "$carmyd_pid" 2>/dev/null &&
		wait "$carmyd_pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

id="order-$(date +%s)-$$"
who=(--principal demo-user --session demo-session)

say "1. A new identity: the tool runs and its result is recorded"
show $run "${who[@]}" --request-id "$id" --tool create_order --json -- \
	sh -c 'echo "{\"order_id\":$$}"'

say "2. Same identity and fingerprint: replayed, same execution_id, the tool does not run"
show $run "${who[@]}" --request-id "$id" --tool create_order --json -- \
	sh -c 'echo "{\"order_id\":$$}"'

say "3. Same identity, different arguments: IDEMPOTENCY_CONFLICT"
show $run "${who[@]}" --request-id "$id" --tool create_order --json -- \
	sh -c 'echo different'

say "4. Same identity while it is still running: EXECUTION_UNCERTAIN"
mkfifo "$tmp/ready" "$tmp/gate"
slow_cmd=(sh -c "echo started > $tmp/ready; exec cat $tmp/gate")
$run "${who[@]}" --request-id "$id-slow" --tool slow -- "${slow_cmd[@]}" &
slow=$!
if ! timeout 10 cat "$tmp/ready" >/dev/null; then	# the tool is running now
	echo "quickstart: the slow tool did not start; see carmy-run's error above" >&2
	exit 1
fi
show $run "${who[@]}" --request-id "$id-slow" --tool slow --json -- "${slow_cmd[@]}"

say "   ... and once its process is killed (kill -9): EXECUTION_UNCERTAIN, interrupted"
kill -9 "$slow"; wait "$slow" 2>/dev/null || true; slow=
for _ in $(seq 1 500); do	# carmyd reacts within milliseconds
	out=$($run "${who[@]}" --request-id "$id-slow" --tool slow --json -- "${slow_cmd[@]}" 2>/dev/null || true)
	case "$out" in *interrupted*) break ;; esac
done
printf '$ %s --request-id %s-slow --tool slow --json -- ...\n%s\n' "$run" "$id" "$out"

say "Done. carmyd stops now; its table stays in /dev/shm for the next start ($carmyd)."
