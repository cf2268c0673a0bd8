// Command dlock implements distributed locks for shell scripts and cron
// jobs: flock(1) across machines, on a single Redis node, on Redlock across
// several independent Redis masters, on an etcd cluster, or on a PostgreSQL
// advisory lock.
//
//	dlock run [--redis URL]... [--postgres DSN] [--etcd URL]... [-t TTL] [-w WAIT | -n] [-E N] [-q] [--grace 10s] [--name NAME] [--limit N] [--verbose] KEY [--] CMD [ARG]...
//	dlock run [flags] -c 'SHELL COMMAND' KEY
//	dlock elect [run's flags] [--id ID] [--recampaign] NAME [--] CMD [ARG]...
//	dlock leader [-w] [--json] NAME
//	dlock acquire KEY [-t TTL] [-w WAIT | -n] [-E N] [-q] [--limit N] [--verbose] [--json]
//	dlock extend KEY [TOKEN] [-t TTL]
//	dlock release KEY [TOKEN]
//	dlock inspect [PATTERN] [--json] [--watch INTERVAL] [--show-token] [--limit N]
//	dlock demo [--redis URL]...
//
// The lock flags follow flock(1): -t/--ttl is the lease (30s); -w/--wait is
// how long to wait for a busy lock (0, the default, tries once; "forever"
// waits without limit); both take seconds, as flock does ("-w 5", "-t
// 0.5"), or a duration ("1m30s"). -n/--nb is --wait 0; -E/--conflict-exit-code
// N exits N instead of 75 when the lock is busy; -q/--quiet prints nothing
// for a busy lock (other errors still print); --verbose says on stderr,
// once the lock is granted, how long dlock waited, the fence, the backend
// and the holder record. run parses its flags up to the command's name, as
// flock does: "dlock run -w 5 nightly ./job.sh -v" runs ./job.sh -v, and
// "--" before the command is needed only when the command's arguments hold
// a "--". run -c runs a string with /bin/sh -c instead; run --name labels
// the holder record that inspect shows. extend and
// release read the token from DLOCK_TOKEN when it is not an argument (an
// argument is visible in ps), and acquire prints export lines of DLOCK_KEY,
// DLOCK_TOKEN and DLOCK_FENCE for eval (kept in a variable first: eval "$(...)" exits 0
// even when the command inside failed):
//
//	lock=$(dlock acquire deploy -t 300) || exit
//	eval "$lock"
//	./migrate.sh --fence "$DLOCK_FENCE" && dlock extend deploy -t 300
//	dlock release deploy
//
// With --limit N, run and acquire take one of N permits of KEY, a
// semaphore: up to N holders at once, each on one of its slots. The command
// (or acquire's output) gets DLOCK_SLOT, and DLOCK_KEY is the slot's key,
// {KEY}#SLOT, whose fence DLOCK_FENCE is; the backend records the limit,
// and a run with another --limit exits 64 while permits are held:
//
//	dlock run --limit 5 -w forever vendor-api -- ./call-vendor.sh
//
// In cron, skip a run silently while the previous one still holds the lock,
// and keep the job's own exit status otherwise:
//
//	*/5 * * * * dlock run -n -q -E 0 sync ./sync.sh
//
// Every wait is bounded, unless -w forever: by --wait while the lock is
// busy, and for a backend that does not answer (down, or accepting
// connections and staying silent) by the larger of --wait and one try,
// which takes at most the URL's dial_timeout + read_timeout (5s + 3s when
// the URL sets none), whatever it sends, or the DSN's connect_timeout, or
// 5s on etcd; then dlock exits 69.
//
// One --redis URL (or host:port) selects a single Redis node, several
// select Redlock; --etcd URLs name the members of one etcd cluster. The
// variables DLOCK_REDIS and DLOCK_ETCD (comma-separated) and DLOCK_POSTGRES
// are used when no backend flag is given. Passwords are never printed.
// What happens to a held lock, and the backends' warnings, are said in
// one line each on stderr.
//
// # Guarantees and limits
//
// run holds the lock exactly while the command runs: it extends the lock in
// the background (each time a third of the TTL has passed). When an
// extension is refused it sends SIGTERM to the command's process group at
// once; while the backend does not answer it sends SIGTERM when only
// --grace of the validity is left (--grace is at most a third of the TTL).
// SIGKILL follows --grace later, and never after the validity's end, so the
// next holder cannot start beside the command; run then exits 76.
//
// Nothing the command starts outlives the lock. The command runs under a
// supervising process, dlock's own binary ("dlock run-supervisor" in ps),
// that on Linux is the subreaper of all the command's descendants, so that
// even a daemon that left the process group (setsid) or lost its parent
// stays within reach. Whatever the command left running when it exits is
// killed before the lock is released. If dlock dies without cleaning up
// (SIGKILL, the OOM killer, a panic), the supervisor sees its control pipe
// close and kills every process of the command at once; the lock expires
// with its TTL (on PostgreSQL it ends with the session, at once, and the
// next holder may start in the milliseconds the kill takes). Out of reach:
// processes started for the command outside its tree (systemd-run, at, ssh,
// a container runtime) and, if the supervisor itself is killed, what the
// command started outside its process group. On other systems than Linux
// only the command's process group is killed.
//
// What no supervision can do is act while dlock itself is paused (SIGSTOP,
// a frozen VM or machine) past the validity: the command then runs beside
// the next holder until dlock resumes. A command whose overlap would
// corrupt data must pass DLOCK_FENCE to the resource it writes, which
// rejects writes that carry a fence lower than one it has seen (see package
// fence).
//
// # Elections
//
// elect runs a command while this process leads the election NAME: of the
// candidates on NAME (dlock elect, programs using dlock.Lead) one leads at
// a time, and the others wait (--wait forever, by default) to take over.
// An election is a lock, which elect holds as run does, with run's flags
// and supervision: the command gets DLOCK_TERM (the term number, the
// grant's fence, growing with every leadership) and DLOCK_LEADER (the
// identity, --id, host:pid by default) besides run's variables; a loss
// terminates it and exits 76, or with --recampaign campaigns again and
// runs it anew in the next term; when the command exits, elect resigns
// (the next candidate leads at once) and exits with its status.
//
// leader prints who leads NAME, its term and since when where the backend
// knows it, or that nobody leads, which exits 3; --json prints
// {"name", "led", "leader", "term", "since"}. leader -w prints every
// change, nobody included and never a lower term after a higher one,
// until SIGINT or SIGTERM (exit 0). On etcd, NAME is also etcdctl elect's
// election: each sees the other's leader.
//
// acquire, extend and release let a script hold a lock across several
// commands; nothing extends such a lock automatically, so the script must
// extend it before --ttl passes. They need Redis or etcd: a PostgreSQL
// advisory lock belongs to the database session, which ends with the dlock
// process.
//
// inspect lists the held locks: key, remaining TTL, fence, waiters and,
// where known, the holder. --json prints {"locks":[...]}, each lock in the
// JSON form of the Go library's dlock.LockInfo ("ttl_ms", "fence",
// "holder", "waiting", "majority"), and "locks" is [] when nothing matches.
// --watch INTERVAL lists again every INTERVAL: on a terminal it redraws the
// screen; into a pipe it writes the listings one after the other, without
// terminal escapes, and with --json one JSON document per line (NDJSON):
//
//	dlock inspect --watch 5s --json 'billing:*' | jq -c '[.locks[] | {key, ttl_ms}]'
//
// A lock's token lets whoever has it release or extend the lock, so inspect
// shows tokens only with --show-token. PostgreSQL knows an advisory lock
// only by a hash of its name: a lock held by dlock run is listed by its
// name, which run publishes in its session's application_name (names up to
// 63 bytes of printable ASCII); other locks are listed as "advisory:<n>",
// or by name when the pattern is that plain name. A semaphore's permits are
// listed under their slots' keys, with its limit and how many are held:
// dlock inspect '{vendor-api}#*'.
//
// # Exit codes
//
//	0      success (run: the command exited 0)
//	1      other failure
//	3      leader: nobody leads the election
//	64     usage error
//	69     backend unreachable
//	75     lock busy: held by another owner until --wait ran out (-E N: N);
//	       elect: another candidate led
//	76     lock lost, or not extended in time, while the command ran; or the
//	       token no longer holds it
//	78     backend refused: fix its setup (wrong password or user, missing
//	       permission, a replica, no memory, no fence sequence), at once
//	126    run, elect: the command could not be started
//	127    run, elect: the command was not found
//	128+N  run, elect: the command died of signal N (or dlock did, while
//	       waiting)
//
// The codes are the same in every subcommand. Otherwise run (and elect)
// exits with the command's own status, which may coincide with one of the
// codes above (-E never changes it); a script that must tell them apart
// should have its command avoid 64-78. The table lives in exitCodesHelp (cli.go) too, which
// every --help prints.
package main
