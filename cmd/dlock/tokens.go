package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/bridge"
)

func (a *app) acquireCmd() *cobra.Command {
	var (
		bf     backendFlags
		lf     lockFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "acquire [flags] KEY",
		Short: "Take a lock that outlives this command (for shell scripts)",
		Long: `Acquire takes the lock on KEY for --ttl and prints it. The lock stays held after
dlock exits, until it is released, or --ttl passes without an extend. Keep the
token: extend and release need it, as an argument or (not visible in ps) in
DLOCK_TOKEN, which eval of the output exports. (Keep the output in a variable
first: eval "$(dlock acquire KEY)" exits 0 even when acquire failed.)

Output, one exported variable per line, ready for eval (values are
shell-quoted):
  export DLOCK_KEY=billing
  export DLOCK_TOKEN=M3ZKQ6XBL5RF2TQ7NW4JH5DAYE
  export DLOCK_FENCE=42
With --json: {"key":"billing","token":"M3ZK...","fence":42,"ttl_ms":30000}

With --limit N, KEY is a semaphore (see dlock run): acquire takes one of its N
permits, prints its slot's key ({KEY}#SLOT) as DLOCK_KEY, which extend and
release take, and adds DLOCK_SLOT (with --json, "slot").

Redis or etcd (on etcd the lock is a lease of --ttl, rounded up to whole
seconds): a PostgreSQL advisory lock ends with the session that took it, so
it cannot outlive dlock (use dlock run).

` + exitCodesHelp,
		Example: `  export DLOCK_REDIS=redis://:secret@redis.internal:6379
  lock=$(dlock acquire deploy -t 5m -w 1m) || exit   # 75: busy, 69: unreachable, 78: refused
  eval "$lock"
  trap 'dlock release deploy' EXIT    # the token comes from DLOCK_TOKEN
  ./migrate.sh --fence "$DLOCK_FENCE"
  dlock extend deploy -t 5m || exit   # 76: the lock is gone, stop
  ./restart.sh

  # give up at once, silently, with exit 0, if someone else deploys
  lock=$(dlock acquire deploy -n -q -E 0 -t 5m) || exit; [ -n "$lock" ] || exit 0

  # JSON for programs
  dlock acquire deploy --ttl 5m --json | jq -r .token`,
		Args: exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := bridge.CheckKey(key); err != nil {
				return &usageError{err: err}
			}
			if err := lf.check(cmd); err != nil {
				return err
			}
			ttl, wait := lf.ttl, lf.wait
			if err := checkDurations(ttl, wait, 0); err != nil {
				return err
			}
			bf.ttl = ttl
			be, err := a.openBackend(cmd.Context(), cmd, &bf, useTokens)
			if err != nil {
				return err
			}
			defer be.close()

			ctx, interrupted, stop := interruptible(cmd.Context())
			defer stop()
			opts := []dlock.Option{dlock.WithRetryCount(0)}
			if wait > 0 {
				opts = nil
			}
			if wait > 0 && wait != forever {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, wait)
				defer cancel()
			}
			rec := &recorder{Locker: lf.locker(be.locker)}
			begun := time.Now()
			lock, err := dlock.Acquire(ctx, rec, key, ttl, opts...)
			if err != nil {
				if sig := interrupted(); sig != nil {
					return exitf(signalCode(sig), "interrupted by %v while waiting for lock %q", sig, key)
				}
				return lf.busy(acquireError(err, rec, key, lf.limit, wait))
			}
			be.keep = true // the lock outlives this process
			if lf.verbose {
				a.granted(lock, time.Since(begun), be, &bf)
			}
			return a.printAcquired(lock, ttl, asJSON)
		},
	}
	addBackendFlags(cmd, &bf)
	f := cmd.Flags()
	lf.addTTL(cmd, "lock lease: the lock expires this long after acquire or the last extend")
	lf.addWait(cmd)
	lf.addLimit(cmd)
	f.BoolVar(&asJSON, "json", false, "print a JSON object instead of shell variables")
	return cmd
}

// printAcquired prints what acquire took: shell variables, or JSON. A
// permit (--limit) has a slot too.
func (a *app) printAcquired(lock *dlock.Lock, ttl time.Duration, asJSON bool) error {
	var slot *int
	if s := lock.Slot(); s >= 0 {
		slot = &s
	}
	if asJSON {
		return json.NewEncoder(a.stdout).Encode(struct {
			Key   string `json:"key"`
			Token string `json:"token"`
			Fence uint64 `json:"fence"`
			Slot  *int   `json:"slot,omitempty"`
			TTLms int64  `json:"ttl_ms"`
		}{lock.Key(), lock.Token(), lock.Fence(), slot, bridge.Milliseconds(ttl)})
	}
	_, err := fmt.Fprintf(a.stdout, "export DLOCK_KEY=%s\nexport DLOCK_TOKEN=%s\nexport DLOCK_FENCE=%d\n", shellQuote(lock.Key()), shellQuote(lock.Token()), lock.Fence())
	if err == nil && slot != nil {
		_, err = fmt.Fprintf(a.stdout, "export DLOCK_SLOT=%d\n", *slot)
	}
	return err
}

func (a *app) extendCmd() *cobra.Command {
	var (
		bf backendFlags
		lf lockFlags
	)
	cmd := &cobra.Command{
		Use:   "extend [flags] KEY [TOKEN]",
		Short: "Reset the TTL of a lock taken with acquire",
		Long: `Extend resets the lock on KEY to expire --ttl from now, if it still holds TOKEN
(default: $DLOCK_TOKEN, which eval of acquire's output sets).
It exits 0 when it did, and 76 when the lock is no longer held by TOKEN (it
expired, was released, or another owner took it): stop the work then.

Redis or etcd (see dlock acquire --help).

` + exitCodesHelp,
		Example: `  dlock extend deploy -t 5m || { echo "lost the deploy lock" >&2; exit 1; }`,
		Args:    tokenArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			key, token, err := a.keyToken(args)
			if err != nil {
				return err
			}
			ttl := lf.ttl
			if err := checkDurations(ttl, 0, 0); err != nil {
				return err
			}
			bf.ttl = ttl
			be, err := a.openBackend(cmd.Context(), cmd, &bf, useTokens)
			if err != nil {
				return err
			}
			defer be.close()
			be.keep = true // the lease it may move the lock to must live on
			if err := be.tokens.ExtendToken(cmd.Context(), key, token, ttl); err != nil {
				return tokenError(err, key)
			}
			return nil
		},
	}
	addBackendFlags(cmd, &bf)
	lf.addTTL(cmd, "new lease, counted from now")
	return cmd
}

func (a *app) releaseCmd() *cobra.Command {
	var bf backendFlags
	cmd := &cobra.Command{
		Use:   "release [flags] KEY [TOKEN]",
		Short: "Release a lock taken with acquire",
		Long: `Release deletes the lock on KEY if it still holds TOKEN (default: $DLOCK_TOKEN),
and never touches a lock another owner took since. It exits 0 when it released the lock and 76 when the
lock was no longer held by TOKEN.

Redis or etcd (see dlock acquire --help).

` + exitCodesHelp,
		Example: `  lock=$(dlock acquire deploy) || exit; eval "$lock"
  ./deploy.sh; dlock release deploy`,
		Args: tokenArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			key, token, err := a.keyToken(args)
			if err != nil {
				return err
			}
			be, err := a.openBackend(cmd.Context(), cmd, &bf, useTokens)
			if err != nil {
				return err
			}
			defer be.close()
			if err := be.tokens.ReleaseToken(cmd.Context(), key, token); err != nil {
				return tokenError(err, key)
			}
			return nil
		},
	}
	addBackendFlags(cmd, &bf)
	return cmd
}

// exactArgs requires the named positional arguments, and says which are
// missing.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return usagef("missing %s", strings.Join(names[len(args):], " and "))
		case len(args) > len(names):
			return usagef("too many arguments: want %s, got %q", strings.Join(names, " "), args)
		}
		return nil
	}
}

// tokenArgs accepts KEY [TOKEN]: the token defaults to $DLOCK_TOKEN, so it
// need not appear in ps.
func tokenArgs(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usagef("missing KEY")
	case len(args) > 2:
		return usagef("too many arguments: want KEY [TOKEN], got %q", args)
	}
	return nil
}

// keyToken returns the KEY and the TOKEN argument, or $DLOCK_TOKEN without it.
func (a *app) keyToken(args []string) (key, token string, err error) {
	key = args[0]
	if len(args) == 2 {
		return key, args[1], nil
	}
	if token = a.lookupEnv("DLOCK_TOKEN"); token == "" {
		return "", "", usagef("missing TOKEN: give it as an argument or in DLOCK_TOKEN")
	}
	return key, token, nil
}

// interruptible returns a context cancelled by SIGINT, SIGTERM or SIGHUP,
// and a function that tells which signal it was.
func interruptible(parent context.Context) (ctx context.Context, interrupted func() os.Signal, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, forwardedSignals...)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case sig := <-sigs:
			cancel(signalErr{sig})
		case <-done:
		}
	}()
	interrupted = func() os.Signal {
		var se signalErr
		if errors.As(context.Cause(ctx), &se) {
			return se.sig
		}
		return nil
	}
	stop = func() {
		signal.Stop(sigs)
		close(done)
		<-exited
		cancel(nil)
	}
	return ctx, interrupted, stop
}

type signalErr struct{ sig os.Signal }

func (e signalErr) Error() string { return "interrupted by " + e.sig.String() }

// shellQuote quotes s for a POSIX shell unless it is plainly safe.
func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_-.,:/@%+=", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
