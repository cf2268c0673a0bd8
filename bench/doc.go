// Package bench implements dlock's benchmarks against its peers —
// go-redsync/redsync v4, bsm/redislock and rueidislock — and against the
// leanest raw go-redis code that does the same protocol, all measured in
// one run so that ratios, not absolute numbers, are what is compared.
//
// It is a module of its own, so the peers are dependencies of the
// benchmarks and never of the library. Run everything with
//
//	bash bench/run.sh
//
// which starts its own redis-server processes (one, plus five for Redlock),
// lets the Postgres benchmark start a throwaway cluster, runs `go test
// -bench` and prints a markdown table of ratios to the raw baseline (see
// RESULTS.md for the last run). The groups:
//
//   - A: an uncontended acquire+release by one goroutine.
//   - B: the same over five independent Redis masters (Redlock).
//   - C: 16 goroutines, each with its own client, on one key. C1: hold 0
//     and re-acquire at once. C2: hold 1ms, then step aside until another
//     goroutine holds the lock, so every acquisition is a hand-off.
//   - D: 64 goroutines on their own keys sharing one client.
//   - E: a PostgreSQL advisory-lock cycle.
//
// On a small shared machine one implementation measured after another can
// land in a different phase (a round trip's cost swings by tens of percent
// for seconds at a time), so the ratios the targets are checked on come
// from interleaved runs: IA, IB and IE alternate an implementation with
// the raw baseline in blocks of 25 cycles over the same clients or pool,
// IC1 alternates dlock with each peer in 400ms windows of C1, and ID runs
// D's 64 goroutines on the baseline and an implementation in alternating
// 100ms windows. Their raw rows (the baseline against itself) show the
// method's own error.
//
// On a virtual machine whose idle vCPUs halt, every round trip may pay the
// host's wake-up, and C1 then ranks the implementations partly by how busy
// their waiters keep the CPUs (a waiter that polls keeps them awake).
// BENCH_NO_IDLE=1 bash bench/run.sh (as root) holds /dev/cpu_dma_latency at
// 0 for the run, so idle CPUs poll instead of halting; RESULTS-noidle.md is
// such a run.
//
// The benchmarks need the servers named in the environment (BENCH_REDIS,
// BENCH_REDLOCK, BENCH_POSTGRES); without them they start their own through
// the project's test harness.
package bench
