#!/usr/bin/env bash
# Compares two builds of dlock in one run, on the same servers, passes of
# each alternating: A interleaved with raw (IA), A's allocations per cycle
# (A, -benchmem), B interleaved with the raw fan-out (IB), D interleaved
# with raw (ID), and the contended C1 and C2 (dlock only). Prints each
# figure's median over the passes, per build, as a markdown table (the
# ratios to raw, allocations, throughput, hand-off and fairness figures;
# go test's own lines go to stderr). Usage,
# from the repository root:
#
#   bash bench/compare.sh [OLD_REV [NEW_REV]]     # default: main HEAD
#
# PASSES (default 5) and BENCH_WINDOW (C1 and C2, default 1s) tune it.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:-main}
new=${2:-HEAD}
passes=${PASSES:-5}
export BENCH_WINDOW=${BENCH_WINDOW:-1s}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

for b in old new; do
	rev=${!b}
	mkdir -p "$tmp/$b"
	git archive "$rev" | tar -x -C "$tmp/$b"
	(cd "$tmp/$b/bench" && go test -c -o "$tmp/$b.test" .) >&2
	echo "$b = $rev ($(git rev-parse --short "$rev"))" >&2
done

start_redis() {
	local port
	while :; do
		port=$((20000 + RANDOM % 20000))
		(exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null || break
	done
	mkdir -p "$tmp/r$port"
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp/r$port" --logfile "$tmp/r$port/redis.log" --daemonize no &
	pids+=($!)
	for _ in $(seq 100); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.05
	done
	addr=127.0.0.1:$port
}
start_redis
export BENCH_REDIS=$addr
nodes=()
for _ in 1 2 3 4 5; do
	start_redis
	nodes+=("$addr")
done
BENCH_REDLOCK=$(IFS=,; echo "${nodes[*]}")
export BENCH_REDLOCK

run() { # build, group, benchtime, extra flags; a failure is reported, not fatal
	local o
	if ! o=$("$tmp/$1.test" -test.run '^$' -test.bench "^Benchmark$2\$/^dlock\$" -test.benchtime "$3" "${@:4}" 2>&1); then
		echo "$1 $2 FAILED: $(grep -v '^Benchmark' <<<"$o" | head -20)" >&2
	fi
	grep '^Benchmark' <<<"$o" | sed "s/^/$1 /" || true
}
out=$tmp/out.txt
for _ in $(seq "$passes"); do
	for b in old new; do
		run "$b" IA 1000x
		run "$b" A 1500x -test.benchmem
		run "$b" IB 300x
		run "$b" ID 3x
		run "$b" 'C[12]' 1x
	done
done | tee "$out" >&2

# The medians: one row per benchmark and metric, a column per build.
echo "| benchmark | metric | old: $old | new: $new | new/old |"
echo "|---|---|---:|---:|---:|"
awk '
	BEGIN { split("x-raw p50-x-raw allocs/op cycles/s acq/s handoff-p50-us wait-max-x-p50 acq-min-x-mean", ms, " "); for (i in ms) want[ms[i]] = 1 }
	{ b = $1; name = $2; sub(/-[0-9]+$/, "", name)
	  for (i = 4; i < NF; i += 2) { if (!want[$(i+1)]) continue
	    key = name " " $(i+1); v[b, key, ++n[b, key]] = $i; keys[key] = 1 } }
	function med(b, key,   m, i, j, t, a) {
		m = n[b, key]; if (!m) return "-"
		for (i = 1; i <= m; i++) a[i] = v[b, key, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	END {
		for (key in keys) {
			split(key, k, " "); o = med("old", key); w = med("new", key)
			r = (o + 0 != 0 && w != "-") ? sprintf("%.2f", w / o) : "-"
			printf "| %s | %s | %s | %s | %s |\n", k[1], k[2], o, w, r
		}
	}' "$out" | sort
