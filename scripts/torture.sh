#!/usr/bin/env bash
# The torture part of `make test`: cmd/dlock/internal/torture's tests (a minute of
# dlock torture per backend, then 30s of a semaphore per backend, 25s of the
# election scenario per backend, the negative-control sweep, the checker's own
# tests), run on their own so that their verdicts can be printed (go test shows
# a passing package's output only with -v). Fails when a test fails,
# and then prints everything.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
(cd cmd/dlock && "${GO:-go}" test -race -count=1 -timeout 15m -v ./internal/torture) >"$log" 2>&1
status=$?
if [ "$status" -ne 0 ]; then
	cat "$log"
	exit "$status"
fi
grep -E 'Verdict for|^ +(sections completed|overlaps seen|entries with|explained:|unexplained|fenced writes|one fence|stale operations|register history|Do contexts|lapsed leases|errors by sentinel|longest wait|locks left|observers:|observed terms|leaders reported|terms reported|idle stretches|hand-off)|^ +(UN)?SAFE|caught in|^(--- |ok)' "$log"
echo "torture: $(($(date +%s) - start))s"
