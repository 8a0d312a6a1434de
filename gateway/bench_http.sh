#!/bin/bash
# make bench-http: carmy-gateway against the bare libmicrohttpd floor
# (bench-http-floor) and Express 5 + express-idempotency, driven by wrk
# (2 threads, 64 keep-alive connections, the spec's body):
#
#   replays    the same call again and again: the gateway's recorded
#              answer, the floor's fixed one, Express's cached one
#   new calls  a new request_id each time, through a url tool whose
#              upstream (the floor) answers at once; Express's handler
#              makes the same upstream call
#
# Prints requests per second and the ratios the issue sets (replays: at
# least 70% of the floor and 20x Express; new calls: 3x Express). Figures
# are quoted, never asserted: the exit status says only whether the run
# worked. Needs wrk (Debian), node and npm (express@5 and
# express-idempotency@1.0.6 are installed into $CARMY_BENCH_NPM, by
# default ~/.cache/carmy-bench-http, the first time).
#
#   bench_http.sh BUILDDIR SRCDIR [SECONDS]
set -euo pipefail
builddir=$1 srcdir=$2 secs=${3:-10}
npm_dir=${CARMY_BENCH_NPM:-$HOME/.cache/carmy-bench-http}

for t in wrk node npm; do
	command -v "$t" >/dev/null || { echo "bench-http: $t not found (apt-get install wrk nodejs npm)" >&2; exit 1; }
done
if [ ! -d "$npm_dir/node_modules/express-idempotency" ]; then
	mkdir -p "$npm_dir"
	npm install --silent --no-audit --no-fund --prefix "$npm_dir" \
		express@5 express-idempotency@1.0.6 >/dev/null
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/carmy-bench-http.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || :; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || :; done
	rm -rf "$tmp"
}
trap cleanup EXIT

# start NAME PATTERN CMD...: run CMD, wait (60 s) for its first line to
# match PATTERN (a regex with one group), and set $got to that group.
start() {
	local name=$1 pat=$2 line fd
	shift 2
	mkfifo "$tmp/$name.out"
	"$@" >"$tmp/$name.out" 2>"$tmp/$name.log" &
	pids+=($!)
	exec {fd}<"$tmp/$name.out"
	if ! read -r -t 60 -u "$fd" line || [[ ! $line =~ $pat ]]; then
		echo "bench-http: $name did not start: ${line:-} $(cat "$tmp/$name.log")" >&2
		exit 1
	fi
	got=${BASH_REMATCH[1]}
}

start carmyd '^carmyd ready (.*)' "$builddir/daemon/carmyd" --foreground \
	--transient --socket "$tmp/carmyd.sock" --capacity 400000 --max-result 1K
start floor '^ready ([0-9]+)$' "$builddir/gateway/bench-http-floor" 0 2
floor=$got

cat >"$tmp/create_order" <<'TOOL'
#!/bin/sh
echo '{"order_id":1}'
TOOL
chmod +x "$tmp/create_order"
cat >"$tmp/tools.json" <<TOOLS
{"tools": {"create_order": {"command": ["$tmp/create_order"]},
           "up": {"url": "http://127.0.0.1:$floor/upstream"}}}
TOOLS
echo '{"tokens": {"bench-token": "bench"}}' >"$tmp/tokens.json"
chmod 600 "$tmp/tokens.json"
start gateway '^carmy-gateway ready listen=([^ ,]+)' "$builddir/gateway/carmy-gateway" \
	--foreground --socket "$tmp/carmyd.sock" --tools "$tmp/tools.json" \
	--tokens "$tmp/tokens.json" --listen 127.0.0.1:0 --threads 2 --log-level warn
gateway=$got
export NODE_PATH=$npm_dir/node_modules
start express '^ready ([0-9]+)$' node "$srcdir/gateway/bench_express.js" 0
express=$got
start express_up '^ready ([0-9]+)$' node "$srcdir/gateway/bench_express.js" 0 \
	"http://127.0.0.1:$floor/upstream"
express_up=$got

body='{"tool":"create_order","arguments":{"sku":"KB-01"},"request_id":"abc"}'
cat >"$tmp/replay.lua" <<LUA
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-token"
wrk.headers["Idempotency-Key"] = "abc"
LUA
cat >"$tmp/new.lua" <<'LUA'
local threads = 0
function setup(thread)
	threads = threads + 1
	thread:set("tid", threads)
end
local n = 0
function request()
	n = n + 1
	local key = tid .. "-" .. n
	return wrk.format("POST", "/agent/execute", {
		["Content-Type"] = "application/json",
		["Authorization"] = "Bearer bench-token",
		["Idempotency-Key"] = key,
	}, '{"tool":"up","arguments":{"sku":"KB-01"},"request_id":"' .. key .. '"}')
end
LUA

# The first call of the replayed identity, everywhere.
for url in "http://$gateway" "http://127.0.0.1:$express"; do
	curl -s -o /dev/null -H 'Content-Type: application/json' \
		-H 'Authorization: Bearer bench-token' -H 'Idempotency-Key: abc' \
		--data-binary "$body" "$url/agent/execute"
done

# run NAME SCRIPT URL: wrk, then "NAME RPS NON2XX" on stdout.
run() {
	local out rps bad
	out=$(wrk -t2 -c64 -d"${secs}s" -s "$3" "$2/agent/execute")
	rps=$(echo "$out" | sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p')
	bad=$(echo "$out" | sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p')
	lat=$(echo "$out" | sed -n 's/^ *Latency *\([^ ]*\).*/\1/p')
	printf '%-30s %12s req/s  mean latency %-8s non-2xx %s\n' "$1" "$rps" "$lat" "${bad:-0}"
	eval "$4=$rps"
}

echo "make bench-http: wrk -t2 -c64 -d${secs}s on $(nproc) CPUs"
run "floor (bare libmicrohttpd)" "http://127.0.0.1:$floor" "$tmp/replay.lua" r_floor
run "gateway replays" "http://$gateway" "$tmp/replay.lua" r_gw
run "express-idempotency replays" "http://127.0.0.1:$express" "$tmp/replay.lua" r_ex
run "gateway new calls (url tool)" "http://$gateway" "$tmp/new.lua" n_gw
run "express new calls (upstream)" "http://127.0.0.1:$express_up" "$tmp/new.lua" n_ex
awk -v f="$r_floor" -v g="$r_gw" -v e="$r_ex" -v ng="$n_gw" -v ne="$n_ex" 'BEGIN {
	printf "replays:   gateway/floor %.0f%% (target >= 70%%), gateway/express %.1fx (target >= 20x)\n", 100 * g / f, g / e
	printf "new calls: gateway/express %.1fx (target >= 3x)\n", ng / ne
}'
