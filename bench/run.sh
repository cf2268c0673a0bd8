#!/usr/bin/env bash
# Runs dlock's benchmarks against redsync, bsm/redislock and rueidislock and
# prints markdown to stdout: machine facts, then tables of ratios to a raw
# go-redis baseline measured in the same run (go test's own output goes to
# stderr). Usage, from the repository root:
#
#   bash bench/run.sh > bench/RESULTS.md
#
# It starts its own redis-server processes (one, plus five for Redlock) on
# free loopback ports and stops them on exit; the PostgreSQL benchmark (E)
# starts a throwaway cluster through internal/testsrv. Takes 2-3 minutes.
# Environment: BENCH_WINDOW (each contended window, default 2s), BENCH_ONLY
# (a -bench regexp, default all groups), BENCH_COUNT (repetitions of the
# uncontended groups, default 3; the tables show medians).
set -euo pipefail
cd "$(dirname "$0")"

for bin in redis-server redis-cli redis-benchmark go; do
	if ! command -v "$bin" >/dev/null; then
		echo "run.sh: $bin not found (apt-get install -y redis-server redis-tools; Go from go.dev)" >&2
		exit 1
	fi
done

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# start_redis starts one redis-server on a free port and sets $addr.
start_redis() {
	local port
	while :; do
		port=$((20000 + RANDOM % 20000))
		(exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null || break # nothing listens there
	done
	mkdir -p "$tmp/$port"
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp/$port" --logfile "$tmp/$port/redis.log" --daemonize no &
	pids+=($!)
	for _ in $(seq 100); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.05
	done
	redis-cli -p "$port" ping >/dev/null
	addr=127.0.0.1:$port
}

start_redis
single=$addr
redlock=()
for _ in 1 2 3 4 5; do
	start_redis
	redlock+=("$addr")
done

# The server's own single-connection ceiling, for scale: two requests per
# lock cycle.
ceiling=$(redis-benchmark -h 127.0.0.1 -p "${single#*:}" -c 1 -n 50000 -t set -q 2>/dev/null |
	awk '/SET/ {print $2; exit}')

export BENCH_REDIS=$single
BENCH_REDLOCK=$(IFS=,; echo "${redlock[*]}")
export BENCH_REDLOCK
export BENCH_WINDOW=${BENCH_WINDOW:-2s}
count=${BENCH_COUNT:-3}
only=${BENCH_ONLY:-.}
export GOFLAGS=-mod=mod

go test -c -o "$tmp/bench.test" . >&2
out=$tmp/bench.txt
{
	"$tmp/bench.test" -test.run '^$' -test.bench "^BenchmarkA\$/$only" -test.benchtime 5000x -test.count "$count"
	"$tmp/bench.test" -test.run '^$' -test.bench "^BenchmarkB\$/$only" -test.benchtime 1000x -test.count "$count"
	"$tmp/bench.test" -test.run '^$' -test.bench "^BenchmarkC[12]\$/$only" -test.benchtime 1x -test.count 1
	"$tmp/bench.test" -test.run '^$' -test.bench "^BenchmarkD\$/$only" -test.benchtime 20000x -test.count "$count"
	"$tmp/bench.test" -test.run '^$' -test.bench "^BenchmarkE\$/$only" -test.benchtime 3000x -test.count "$count"
} 2>&1 | tee "$out" >&2

cat <<EOF
## Benchmark results

Reproduce with \`bash bench/run.sh\` (from the repository root). Figures are
ratios within one run on a shared machine; absolute numbers drift between
runs, ratios much less. Medians of $count runs for A, B, D and E; one
${BENCH_WINDOW} window per implementation for C1 and C2.

- date: $(date -u +%Y-%m-%dT%H:%MZ)
- CPU: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)
- $(go version | cut -d' ' -f3-4), $(redis-server --version | awk '{print $1, $2, $3}')
- server ceiling: redis-benchmark -c 1 -t set = ${ceiling:-?} requests/s, i.e. $(awk -v r="${ceiling:-0}" 'BEGIN {printf "%.0f", r/2}') two-request cycles/s
- peers: $(grep -E 'redsync/v4 |bsm/redislock |redis/rueidis ' go.mod | awk '{printf "%s %s; ", $1, $2}')

EOF
go run ./cmd/benchtable <"$out"
