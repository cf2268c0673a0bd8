// Command dlock implements distributed locks for shell scripts and cron
// jobs: flock(1) across machines, on a single Redis node, on Redlock across
// several independent Redis masters, or on a PostgreSQL advisory lock.
//
//	dlock run [--redis URL]... [--postgres DSN] [--ttl 30s] [--wait 0] [--grace 10s] KEY -- CMD [ARG]...
//	dlock acquire KEY [--ttl D] [--wait D] [--json]
//	dlock extend KEY TOKEN [--ttl D]
//	dlock release KEY TOKEN
//	dlock inspect [PATTERN] [--json]
//	dlock demo [--redis URL]...
//
// One --redis URL selects a single Redis node, several select Redlock; the
// variables DLOCK_REDIS (comma-separated) and DLOCK_POSTGRES are used when
// no backend flag is given. Passwords are never printed.
//
// # Guarantees and limits
//
// run holds the lock exactly while the command runs: it extends the lock in
// the background, and when an extension is refused or the lock's validity
// runs out first, it sends SIGTERM to the command's process group, SIGKILL
// after --grace, and exits 76. What it cannot do is stop the command between
// the moment the lock lapsed and the moment dlock noticed (up to half the
// TTL, or longer if dlock itself was paused): a command whose overlap would
// corrupt data must pass DLOCK_FENCE to the resource it writes, which rejects
// writes that carry a fence lower than one it has seen (see package fence).
//
// acquire, extend and release let a script hold a lock across several
// commands; nothing extends such a lock automatically, so the script must
// extend it before --ttl passes. They need Redis: a PostgreSQL advisory lock
// belongs to the database session, which ends with the dlock process.
//
// # Exit codes
//
//	0      success (run: the command exited 0)
//	1      other failure
//	64     usage error
//	69     backend unreachable
//	75     lock busy: held by another owner until --wait ran out
//	76     lock lost while the command ran, or the token no longer holds it
//	126    run: the command could not be started
//	127    run: the command was not found
//	128+N  run: the command died of signal N (or dlock did, while waiting)
//
// Otherwise run exits with the command's own status, which may coincide with
// one of the codes above; a script that must tell them apart should have
// its command avoid 64-76.
package main
