#!/bin/bash
# make bench-http: carmy-gateway against the bare libmicrohttpd floor
# (bench/bench_http_floor.c) and Express 5 + express-idempotency
# (bench/bench_express.js), driven by wrk (2 threads, 64 keep-alive
# connections, the spec's body):
#
#   replays    the same call again and again: the gateway's recorded
#              answer, the floor's fixed one, Express's cached one
#   new calls  a new request_id each time, through a url tool whose
#              upstream (the floor) answers at once; Express's handler
#              makes the same upstream call
#
# ROUNDS rounds, each of the five figures in turn (floor, gateway replays,
# Express replays, gateway new calls, Express new calls), so that the
# machine's drift hits every side alike. Prints every round's requests per
# second, each side's median, and the median of the rounds' ratios against
# the goals (replays: at least 70% of the floor and 20x Express; new
# calls: 3x Express). Figures are quoted, never asserted: the exit status
# says only whether the run worked. Needs wrk (Debian), node and npm
# (express@5 and express-idempotency@1.0.6 are installed into
# $CARMY_BENCH_NPM, by default ~/.cache/carmy-bench-http, the first time).
#
#   bench_http.sh BUILDDIR SRCDIR [SECONDS [ROUNDS]]
set -euo pipefail
builddir=$1 srcdir=$2 secs=${3:-10} rounds=${4:-5}
npm_dir=${CARMY_BENCH_NPM:-$HOME/.cache/carmy-bench-http}

for t in wrk node npm; do
	command -v "$t" >/dev/null || { echo "bench-http: $t not found (apt-get install wrk nodejs npm)" >&2; exit 1; }
done
[[ $rounds =~ ^[1-9][0-9]*$ && $secs =~ ^[1-9][0-9]*$ ]] ||
	{ echo "bench-http: SECONDS and ROUNDS are whole numbers from 1" >&2; exit 1; }
if [ ! -d "$npm_dir/node_modules/express-idempotency" ]; then
	mkdir -p "$npm_dir"
	npm install --silent --no-audit --no-fund --prefix "$npm_dir" \
		express@5 express-idempotency@1.0.6 >/dev/null
fi

. "$srcdir/bench/bench_lib.sh"
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

# Every round's new calls stay in the table: room for 5 rounds of 20,000
# a second, answers of about 100 bytes.
capacity=$((rounds * secs * 20000 + 1000))
start carmyd '^carmyd ready (.*)' "$builddir/daemon/carmyd" --foreground \
	--transient --socket "$tmp/carmyd.sock" --capacity "$capacity" \
	--max-result 256
start floor '^ready ([0-9]+)$' "$builddir/bench/bench-http-floor" 0 2
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
# The gateway refuses a tools file group or others may write (umask 002).
chmod 644 "$tmp/tools.json"
echo '{"tokens": {"bench-token": "bench"}}' >"$tmp/tokens.json"
chmod 600 "$tmp/tokens.json"
start gateway '^carmy-gateway ready listen=([^ ,]+)' "$builddir/gateway/carmy-gateway" \
	--foreground --socket "$tmp/carmyd.sock" --tools "$tmp/tools.json" \
	--tokens "$tmp/tokens.json" --listen 127.0.0.1:0 --threads 2 --log-level warn
gateway=$got
export NODE_PATH=$npm_dir/node_modules
start express '^ready ([0-9]+)$' node "$srcdir/bench/bench_express.js" 0
express=$got
start express_up '^ready ([0-9]+)$' node "$srcdir/bench/bench_express.js" 0 \
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
# New calls: request_ids ROUND-THREAD-N (the round is wrk's argument), so
# no round replays another's.
cat >"$tmp/new.lua" <<'LUA'
local threads = 0
function setup(thread)
	threads = threads + 1
	thread:set("tid", threads)
end
local prefix = "r"
function init(args)
	prefix = args[1] or "r"
end
local n = 0
function request()
	n = n + 1
	local key = prefix .. "-" .. tid .. "-" .. n
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

# run ROUND NAME SCRIPT URL: wrk; prints "NAME RPS latency non-2xx" and
# appends "ROUND NAME RPS" to $tmp/figures.
run() {
	local out rps bad lat
	out=$(wrk -t2 -c64 -d"${secs}s" -s "$3" "$4/agent/execute" -- "round$1")
	rps=$(echo "$out" | sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p')
	bad=$(echo "$out" | sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p')
	lat=$(echo "$out" | sed -n 's/^ *Latency *\([^ ]*\).*/\1/p')
	[[ -n $rps ]] || { echo "bench-http: wrk gave no figure: $out" >&2; exit 1; }
	printf '  %-30s %12.0f req/s  mean latency %-8s non-2xx %s\n' \
		"$2" "$rps" "$lat" "${bad:-0}"
	echo "$1 $2 $rps" >>"$tmp/figures"
}

echo "make bench-http: wrk -t2 -c64 -d${secs}s, $rounds rounds, on $(nproc) CPUs"
for ((r = 1; r <= rounds; r++)); do
	echo "round $r"
	run "$r" floor "$tmp/replay.lua" "http://127.0.0.1:$floor"
	run "$r" gateway_replays "$tmp/replay.lua" "http://$gateway"
	run "$r" express_replays "$tmp/replay.lua" "http://127.0.0.1:$express"
	run "$r" gateway_new "$tmp/new.lua" "http://$gateway"
	run "$r" express_new "$tmp/new.lua" "http://127.0.0.1:$express_up"
	awk -v r="$r" '$1 == r { v[$2] = $3 } END {
		printf "  round %d: replays %.0f%% of the floor, %.1fx express; new calls %.1fx express\n",
			r, 100 * v["gateway_replays"] / v["floor"],
			v["gateway_replays"] / v["express_replays"],
			v["gateway_new"] / v["express_new"]
	}' "$tmp/figures"
done
awk "$awk_median"'
{ v[$1, $2] = $3; if ($1 > n) n = $1 }
END {
	split("floor gateway_replays express_replays gateway_new express_new", names, " ")
	printf "medians of %d rounds (req/s):", n
	for (k = 1; k <= 5; k++) {
		for (r = 1; r <= n; r++)
			a[r] = v[r, names[k]]
		printf " %s %.0f%s", names[k], median(a, n), k < 5 ? "," : "\n"
	}
	for (r = 1; r <= n; r++) {
		pf[r] = v[r, "gateway_replays"] / v[r, "floor"]
		pe[r] = v[r, "gateway_replays"] / v[r, "express_replays"]
		ne[r] = v[r, "gateway_new"] / v[r, "express_new"]
	}
	printf "replays:   gateway/floor %.0f%% (goal >= 70%%), gateway/express %.1fx (goal >= 20x) (medians of the per-round ratios)\n",
		100 * median(pf, n), median(pe, n)
	printf "new calls: gateway/express %.1fx (goal >= 3x) (median of the per-round ratios)\n",
		median(ne, n)
}' "$tmp/figures"
