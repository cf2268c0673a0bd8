#!/usr/bin/env bash
# Runs dlock's benchmarks against redsync, bsm/redislock and rueidislock and
# prints markdown to stdout: machine facts, then tables of ratios to a raw
# go-redis baseline measured in the same run, each with the targets of
# issues 18 (item 6), 19 (item 3), 25 (items 1 and 5: what an observer and
# the holder record cost) and 27 (what a lock costs the server, D, the
# allocations per cycle, C1's throughput, B) checked beneath it (go test's
# own output goes to stderr). Usage, from the repository root:
#
#   bash bench/run.sh > bench/RESULTS.md
#
# It starts its own redis-server processes (one, plus five for Redlock) on
# free loopback ports, and a throwaway PostgreSQL cluster (bench/cmd/pgserver,
# through internal/testkit/testsrv), and stops them on exit. Takes about 12 minutes.
# Environment: BENCH_WINDOW (each contended window, default 2s), BENCH_ONLY
# (a -bench regexp of implementations, default all), BENCH_COUNT (passes
# over the uncontended groups and their interleaved forms, default 11),
# BENCH_CPASSES (passes over the contended groups, each with a PING loop,
# default 5), BENCH_IDPASSES (passes of D interleaved, default 3),
# BENCH_IC1PASSES (passes of C1 interleaved, default 5),
# BENCH_RESIDUE_NAMES (names locked by the residue group, default 100000),
# BENCH_SPASSES (passes of the semaphore group S, default 5),
# BENCH_NO_IDLE (1: keep the CPUs out of their idle states for the run, see
# below); the tables show medians.
#
# Idle CPUs. On a virtual machine an idle vCPU may halt, and waking it costs
# the host tens of µs. A loop of round trips then pays that on most hops,
# and in C1 a peer whose waiters poll keeps the vCPUs busy, which speeds
# its holder up. On the 2-core VM of bench/RESULTS.md (cpuidle driver
# haltpoll, guest_halt_poll_ns 0) the server's single-connection ceiling
# rose 4.8x, and C1's throughput 1.4-1.8x for dlock and the peers, once no
# vCPU halted (an earlier design's run). With BENCH_NO_IDLE=1 (root) the
# run holds /dev/cpu_dma_latency at 0, the PM QoS request of tuned's
# latency-performance profile, so idle CPUs poll instead of halting; the
# machine facts say which way a run was made.
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
	exec 4>&- 2>/dev/null || true # pgserver stops its cluster when stdin closes
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

# Idle states: how this machine idles, and whether this run keeps the CPUs
# out of it (fd 5 stays open until the script exits).
idle="cpuidle driver $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo unknown)"
if [ -r /sys/module/haltpoll/parameters/guest_halt_poll_ns ]; then
	idle+=", guest_halt_poll_ns $(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns)"
fi
if [ "${BENCH_NO_IDLE:-}" = 1 ]; then
	if ! exec 5>/dev/cpu_dma_latency; then
		echo "run.sh: BENCH_NO_IDLE=1 needs to write /dev/cpu_dma_latency (root)" >&2
		exit 1
	fi
	printf '\0\0\0\0' >&5 # a binary s32 of 0 µs: poll, never halt
	idle+="; /dev/cpu_dma_latency held at 0 for the run (BENCH_NO_IDLE=1): no CPU halts when idle"
else
	idle+="; CPUs idle as configured (BENCH_NO_IDLE=1 keeps them polling)"
fi

# The server's own single-connection ceiling, for scale: two requests per
# lock cycle.
ceiling=$(redis-benchmark -h 127.0.0.1 -p "${single#*:}" -c 1 -n 50000 -t set -q 2>/dev/null |
	tr '\r' '\n' | awk '/requests per second/ {print $2; exit}')
redis-cli -p "${single#*:}" flushall >/dev/null # its key:__rand_int__ would count in the residue figures

# A PostgreSQL cluster for E, started by a helper that stops it when its
# stdin (a fifo we hold open) closes.
mkfifo "$tmp/pg.in"
go build -o "$tmp/pgserver" ./cmd/pgserver >&2
"$tmp/pgserver" <"$tmp/pg.in" >"$tmp/pg.dsn" 2>"$tmp/pg.err" &
pids+=($!)
exec 4>"$tmp/pg.in"
for _ in $(seq 300); do
	[ -s "$tmp/pg.dsn" ] && break
	kill -0 "${pids[-1]}" 2>/dev/null || break
	sleep 0.1
done
if [ -s "$tmp/pg.dsn" ]; then
	BENCH_POSTGRES=$(head -1 "$tmp/pg.dsn")
	export BENCH_POSTGRES
else
	echo "run.sh: PostgreSQL did not start (E will be skipped): $(cat "$tmp/pg.err")" >&2
	only_e=skip
fi

export BENCH_REDIS=$single
BENCH_REDLOCK=$(IFS=,; echo "${redlock[*]}")
export BENCH_REDLOCK
export BENCH_WINDOW=${BENCH_WINDOW:-2s}
count=${BENCH_COUNT:-11}
cpasses=${BENCH_CPASSES:-5}
ic1passes=${BENCH_IC1PASSES:-5}
idpasses=${BENCH_IDPASSES:-3}
idpairs=18 # BenchmarkID runs 6 pairs of windows per b.N
only=${BENCH_ONLY:-.}

go test -c -o "$tmp/bench.test" . >&2
out=$tmp/bench.txt
# bench GROUP BENCHTIME [IMPLEMENTATIONS]: one pass over a group.
bench() { "$tmp/bench.test" -test.run '^$' -test.bench "^Benchmark$1\$/${3:-$only}" -test.benchtime "$2"; }
{
	# Residue first, while nothing else has used the servers: no other
	# group's keys expire during its measurement.
	bench Residue 1x .
	# Many short passes over each group alternate the implementations, so
	# that a burst of load from elsewhere on the machine, or a change of
	# how the scheduler places client and server (which can halve or
	# double a round trip for seconds), hits them all alike; benchtable
	# compares each implementation with the baseline of the same pass.
	for _ in $(seq "$count"); do bench A 1500x; done
	for _ in $(seq "$count"); do bench IA 1000x; done
	# dlock's cycle with an observer or the holder record, each
	# interleaved with the cycle that has none (issue 25).
	for _ in $(seq "$count"); do bench Hook 500x .; done
	for _ in $(seq "$count"); do bench B 400x; done
	for _ in $(seq "$count"); do bench IB 300x; done
	# Each pass of the contended groups is followed by PINGs on one client,
	# back to back and each after 1ms idle: the round trip that C2's
	# hand-off is measured in.
	for _ in $(seq "$cpasses"); do
		bench 'C[12]' 1x
		bench Ping 2000x .
	done
	for _ in $(seq "$ic1passes"); do bench IC1 1x; done
	# ID runs 3 passes by default (BENCH_IDPASSES), each of 18 pairs of
	# 100ms windows.
	for _ in $(seq "$count"); do bench D 5000x; done
	for _ in $(seq "$idpasses"); do bench ID "$((idpairs / 6))x"; done
	if [ "${only_e:-}" != skip ]; then
		for _ in $(seq "$count"); do bench E 1000x; done
		for _ in $(seq "$count"); do bench IE 700x; done
	fi
} 2>&1 | tee "$out" >&2

cat <<EOF
## Benchmark results

Reproduce with \`bash bench/run.sh\` (from the repository root). Figures are
ratios within one run on a shared machine; absolute numbers drift between
runs, ratios much less. Medians of $count alternating passes for A, Hook, B, D and E,
where each ratio is the median of the passes' own ratios (the middle half of
them in brackets); medians of $cpasses passes of one ${BENCH_WINDOW} window per
implementation for C1 and C2, each ratio again the median of the passes' own,
each pass followed by PINGs on one client, back to back and after 1ms idle
(the round trip C2's hand-off is counted in),
of $ic1passes passes of C1 interleaved (dlock against each peer in 400ms windows),
and of $idpasses passes of D interleaved (each implementation against raw in $idpairs pairs of 100ms windows).
The residue group ran once, first, on servers nothing else had used yet.
Under each table, one line per target says whether this run met it.

What dlock does here. One node: an attempt is one script (EVALSHA): SET NX PX
of the key and a fence of max(counter + 1, the server's clock in µs), stored
in a counter with a TTL (WithFenceTTL, 1h by default); a release is one
script that deletes the key if it holds the token, pops the head of the
key's waiter queue and PUBLISHes to it. A waiting Acquire queues in the
attempt's own round trip; the woken waiter retries at once, with a plain SET
NX like anyone's (the key is free between holders); a Locker whose release
woke a waiter lets it go first for 50ms; polls every 50-100ms cover the
rest. Redlock: the same scripts on each of the five nodes in one fan-out,
held once a majority granted (no second round); the release raises every
node's counter to the lock's fence.

- date: $(date -u +%Y-%m-%dT%H:%MZ)
- code: $(git -C .. rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C .. diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes')
- CPU: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)
- idle: $idle
- $(go version | cut -d' ' -f3-4), $(redis-server --version | awk '{print $1, $2, $3}')
- server ceiling: redis-benchmark -c 1 -t set = ${ceiling:-?} requests/s, i.e. $(awk -v r="${ceiling:-0}" 'BEGIN {printf "%.0f", r/2}') two-request cycles/s
- peers: $(grep -E 'redsync/v4 |bsm/redislock |redis/rueidis ' go.mod | awk '{printf "%s%s %s", sep, $1, $2; sep="; "}')

EOF
go run ./cmd/benchtable <"$out"

# S: semaphore fairness (semaphore_test.go), medians of its passes.
spasses=${BENCH_SPASSES:-5}
"$tmp/bench.test" -test.run '^$' -test.bench '^BenchmarkS$' -test.benchtime 1x -test.count "$spasses" 2>&1 | tee "$tmp/s.txt" >&2
cat <<EOF

### S. Semaphore fairness: 16 contenders, 4 permits, one node

Each contender has its own client, holds a permit 5ms and asks again at
once, for ${BENCH_WINDOW} windows; medians of $spasses passes. dlock: dlock.Acquire on
redislock's semaphore (one script per attempt, a FIFO of waiters woken by
a release). poll10ms: redis-semaphore's design written out raw, a ZSET of
holders scored by the client's clock, tried every 10ms. A wait is from the
call to the grant (one cut short by the window's end counts as long as it
lasted); min-share is the least served contender's permits against an
even share (1: even).

| implementation | permits/s | p50 ms | p99 ms | max ms | max/p50 | min-share |
|---|---:|---:|---:|---:|---:|---:|
EOF
awk '
function median(key,   n, i, j, v, t) {
	n = cnt[key]
	for (i = 1; i <= n; i++) v[i] = val[key, i]
	for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
	return n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
}
/^BenchmarkS\// {
	split($1, a, "/"); impl = a[2]; sub(/-[0-9]+$/, "", impl)
	if (!(impl in seen)) { seen[impl] = 1; order[++nimpl] = impl }
	for (i = 5; i < NF; i += 2) { k = impl SUBSEP $(i+1); val[k, ++cnt[k]] = $i }
}
END {
	for (o = 1; o <= nimpl; o++) {
		m = order[o]
		printf "| %s | %.0f | %.2f | %.2f | %.1f | %.1f | %.2f |\n", m, median(m SUBSEP "permits/s"), median(m SUBSEP "p50-ms"),
			median(m SUBSEP "p99-ms"), median(m SUBSEP "max-ms"), median(m SUBSEP "max/p50"), median(m SUBSEP "min-share")
	}
}' "$tmp/s.txt"
