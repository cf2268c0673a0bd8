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
// -bench` and prints markdown tables of ratios to the raw baselines, each
// with the targets of issues 18 (item 6), 19 (items 3 and 7) and 25
// (items 1 and 5) checked beneath it (cmd/benchtable; see RESULTS.md for the last run). The groups:
//
//   - A: an uncontended acquire+release by one goroutine, against raw SET NX
//     PX plus the compare-and-delete script. raw-lua runs dlock's own acquire
//     and release scripts with dlock's arguments, straight through go-redis,
//     which separates what the scripts cost from what the library's Go code
//     costs; raw-fenced is the least a fenced lock can send (SET NX PX and
//     an INCR in one pipeline).
//   - Hook: A's dlock cycle with an observer (the default logger's, a no-op
//     one, dlockotel's on the OpenTelemetry SDK) or with WithHolderInfo,
//     interleaved with the same cycle on a Locker with no observer at all,
//     with each side's allocations per cycle: what a hook costs, and that
//     none set costs nothing.
//   - B: the same over five independent Redis masters (Redlock), against a
//     raw fan-out of SET NX PX to every node and the compare-and-delete on
//     every node, each waiting for all five replies. dlock runs its acquire
//     script on every node at once and returns when a majority granted.
//   - C: 16 goroutines, each with its own client, on one key. C1: hold 0
//     and re-acquire at once, with the fairness figures (each goroutine's
//     acquisitions against the mean, the longest wait against the median).
//     C2: hold 1ms, then step aside until another goroutine holds it, so
//     every acquisition is a hand-off, with round trips (total_reads_processed)
//     and commands per hand-off: those the go-redis clients sent, and the
//     server's total_commands_processed, which also counts every command
//     a script runs. Ping measures a PING round trip beside each pass, in
//     a loop and after 1ms idle, the unit C2's hand-off latency is given in.
//   - D: 64 goroutines on their own keys sharing one client.
//   - E: a PostgreSQL advisory-lock cycle.
//   - Residue: 100,000 distinct names locked and released once each, on the
//     single server and on the five Redlock servers, with DBSIZE and
//     used_memory before, right after, and once the fence TTL (shortened to
//     seconds for the run) has passed: what one name costs while its fence
//     counter lives, and that nothing stays after.
//   - S: a semaphore of 4 on one node, 16 contenders each with its own
//     client holding 5ms at a time: the waits' median, p99 and maximum and
//     the least served contender's share, for dlock (redislock's semaphore,
//     a FIFO woken by releases) and for redis-semaphore's design written
//     out raw (a ZSET of holders scored by the client's clock, polled every
//     10ms).
//
// What is measured, in short: dlock's attempt is one script that sets the
// key (SET NX PX) and draws a fence of max(counter+1, the server's clock in
// µs) into a counter with a TTL; its release is one script that deletes the
// key if it holds the token, pops the head of the key's waiter queue and
// publishes to it. The woken waiter retries with an ordinary SET NX; polling
// covers the rest. Redlock runs the same scripts on each node in a single
// fan-out.
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
// 0 for the run, so idle CPUs poll instead of halting; the machine facts of
// a run say which way it was made.
//
// The benchmarks need the servers named in the environment (BENCH_REDIS,
// BENCH_REDLOCK, BENCH_POSTGRES); without them they start their own through
// the project's test harness.
package bench
