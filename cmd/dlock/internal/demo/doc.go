// Package demo implements `dlock demo`: the classic lock scenarios, run
// against real servers, narrated, and checked.
//
// Run goes through the scenarios in order: basic acquire and release; the
// expiry bug with a plain DEL and with dlock's token-checked release; the
// token-checked release (DELEX, or the Lua script before Redis 8.4);
// fencing, where a stale holder's late write is rejected by the resource; a
// leader election, where a leader frozen past its lease is replaced in a
// higher term and its late write is refused by its term; five workers
// through Do that never overlap; Redlock on five servers surviving the
// loss of two and refusing once three are lost; etcd on three members of
// its own, where the fence
// comes from consensus, the leader's loss changes nothing, and a holder
// paused past its lease has its late write refused; and, where PostgreSQL
// server binaries are installed, PostgreSQL on a temporary cluster, where a
// session ended by pg_terminate_backend loses its advisory lock, its Do
// reports dlock.ErrLockLost, its late write is refused by pgfence, and
// SKIP LOCKED does each job of a queue exactly once. Each step prints its
// real outcome in an aligned column, and each scenario ends with what it
// proves.
//
// # Checked, not just printed
//
// Every outcome is compared with what its scenario claims (for the plain-DEL
// anti-pattern that means two holders at once). A mismatch prints FAILED on
// the line and makes Run return an error after the other scenarios ran, so
// the demo doubles as an acceptance test of the library on the user's
// servers.
//
// # Where it runs
//
// Without URLs Run starts five temporary redis-server processes (found on
// PATH) on free loopback ports and stops them, and removes their files, when
// it returns — also when its context is cancelled, which is what the CLI does
// on Ctrl-C. Only where no redis-server exists it runs on embedded
// in-process servers (miniredis, an imitation of Redis) whose TTLs follow the
// real clock, and says so in its first line.
//
// With URLs the single-node scenarios run on the first server, under keys
// that start with a random "dlock-demo:XXXXXXXX:" prefix and are deleted at
// the end (found with SCAN, never KEYS). Redlock uses every given server,
// plus temporary local ones when fewer than five are given. To show lost
// nodes the demo kills servers it started; a server the user gave is never
// touched: the demo reaches it through an in-process TCP relay and "loses"
// it by cutting that relay, which from the lock's side is a network
// partition. Passwords in URLs are never printed.
//
// The etcd members are etcd processes (the etcd binary on PATH) or, where
// there is none, etcd's own server run inside this process
// (go.etcd.io/etcd/server/v3/embed). The PostgreSQL cluster is made by
// initdb in a temporary directory (PostgreSQL's binaries under
// /usr/lib/postgresql/*/bin); where they are missing, the header says in
// one line how to see that scenario. Both are stopped and their files
// removed when their scenario ends.
//
// The header says what ran where: which servers, their Redis version, and
// whether releases used DELEX / SET IFEQ (Redis 8.4+) or the Lua scripts.
package demo
