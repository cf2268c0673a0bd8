package redislock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/testkit/lockcheck"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

// Every public error path of redislock returns an error that matches
// exactly one of dlock's sentinels, on one line, with one "dlock: " prefix
// (lockcheck.Classify), and the context's error where the caller's context
// ended.
func TestErrorSentinels(t *testing.T) {
	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	l := newLocker(t, srv.Client(t))
	down := testsrv.StartRedis(t)
	gone := newLocker(t, down.Client(t))
	if err := raw.Do(testCtx(t), "ACL", "SETUSER", "app", "on", ">pw", "~locks:*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Options()
	opts.Username, opts.Password = "app", "pw"
	ac := redis.NewClient(opts)
	t.Cleanup(func() { ac.Close() })
	limited := newLocker(t, ac)

	held := lockcheck.Key(t)
	holder, err := l.TryAcquire(testCtx(t), held, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())
	noExpiry := lockcheck.Key(t)
	raw.Set(testCtx(t), noExpiry, "by hand", 0)
	wrongType := lockcheck.Key(t)
	raw.LPush(testCtx(t), keys.Fence(wrongType), "x")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	down.Kill()

	lost := func() *dlock.Lock { // a lock whose key was taken away
		k := lockcheck.Key(t)
		lock, err := l.TryAcquire(testCtx(t), k, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		raw.Set(testCtx(t), k, "someone else", time.Minute)
		return lock
	}
	released := func() *dlock.Lock {
		lock, err := l.TryAcquire(testCtx(t), lockcheck.Key(t), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		lock.Release(testCtx(t))
		return lock
	}

	for _, tc := range []struct {
		name string
		err  error
		want error
		also []error
	}{
		{"empty key", try(l, testCtx(t), "", time.Second), dlock.ErrInvalid, nil},
		{"key in dlock's namespace", try(l, testCtx(t), "dlock:fence:{x}", time.Second), dlock.ErrInvalid, nil},
		{"ttl 0", try(l, testCtx(t), "k", 0), dlock.ErrInvalid, nil},
		{"ttl below the drift margin", try(l, testCtx(t), "k", 2*time.Millisecond), dlock.ErrInvalid, nil},
		{"nil context", try(l, nil, "k", time.Second), dlock.ErrInvalid, nil},
		{"prefix in dlock's namespace", func() error { _, err := redislock.New(raw, redislock.WithPrefix("dlock:")); return err }(), dlock.ErrInvalid, nil},
		{"fence ttl 0", func() error { _, err := redislock.New(raw, redislock.WithFenceTTL(0)); return err }(), dlock.ErrInvalid, nil},
		{"busy", try(l, testCtx(t), held, time.Second), dlock.ErrNotAcquired, nil},
		{"busy, no expiry", try(l, testCtx(t), noExpiry, time.Second), dlock.ErrNotAcquired, nil},
		{"wait cancelled", func() error {
			c, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
			defer cancel()
			_, err := dlock.Acquire(c, l, held, time.Second)
			return err
		}(), dlock.ErrNotAcquired, []error{context.DeadlineExceeded}},
		{"attempt cancelled", try(l, cancelled, "k", time.Second), dlock.ErrNotAcquired, []error{context.Canceled}},
		{"server down", try(gone, testCtx(t), "k", time.Second), dlock.ErrUnavailable, nil},
		{"NOPERM", try(limited, testCtx(t), "locks:x", time.Second), dlock.ErrMisconfigured, nil},
		{"fence counter of the wrong type", try(l, testCtx(t), wrongType, time.Second), dlock.ErrMisconfigured, nil},
		{"ReleaseToken, wrong token", l.ReleaseToken(testCtx(t), held, "not-the-token"), dlock.ErrNotHeld, nil},
		{"ExtendToken, wrong token", l.ExtendToken(testCtx(t), held, "not-the-token", time.Minute), dlock.ErrNotHeld, nil},
		{"ReleaseToken, empty token", l.ReleaseToken(testCtx(t), held, ""), dlock.ErrInvalid, nil},
		{"ReleaseToken, server down", gone.ReleaseToken(testCtx(t), "k", "t"), dlock.ErrUnavailable, nil},
		{"ReleaseToken, cancelled", l.ReleaseToken(cancelled, held, "t"), dlock.ErrUnavailable, []error{context.Canceled}},
		{"ExtendToken, cancelled", l.ExtendToken(cancelled, held, "t", time.Minute), dlock.ErrUnavailable, []error{context.Canceled}},
		{"Extend of a lock taken away", lost().Extend(testCtx(t), time.Minute), dlock.ErrNotHeld, nil},
		{"Release of a lock taken away", lost().Release(testCtx(t)), dlock.ErrNotHeld, nil},
		{"Release twice", released().Release(testCtx(t)), dlock.ErrNotHeld, nil},
		{"Extend after Release", released().Extend(testCtx(t), time.Minute), dlock.ErrNotHeld, nil},
		{"Extend with ttl 0", holder.Extend(testCtx(t), 0), dlock.ErrInvalid, nil},
		{"Do, lock taken away", dlock.Do(testCtx(t), l, lockcheck.Key(t), 400*time.Millisecond, func(ctx context.Context) error {
			raw.Set(ctx, dlock.LockFromContext(ctx).Key(), "someone else", time.Minute)
			<-ctx.Done()
			return nil
		}), dlock.ErrLockLost, nil},
		{"Do, nil function", dlock.Do(testCtx(t), l, "k", time.Second, nil), dlock.ErrInvalid, nil},
	} {
		t.Run(tc.name, func(t *testing.T) { lockcheck.WantError(t, tc.err, tc.want, tc.also...) })
	}
	var re redis.Error
	if err := try(limited, testCtx(t), "locks:y", time.Second); !errors.As(err, &re) {
		t.Errorf("NOPERM: %v, want the server's reply in the chain", err)
	}
}

func try(l *redislock.Locker, ctx context.Context, key string, ttl time.Duration) error {
	lock, err := l.TryAcquire(ctx, key, ttl)
	if err == nil {
		lock.Release(context.Background())
	}
	return err
}

// A server that refuses for a reason retrying cannot change makes Do fail
// at once with dlock.ErrMisconfigured and the server's own reason, instead
// of waiting as for an unreachable server (forever, with a context without
// deadline); the Locker's logger warns once. The token operations say so
// too.
func TestMisconfigured(t *testing.T) {
	t.Parallel()
	withPassword := testsrv.StartRedis(t)
	if err := withPassword.Client(t).ConfigSet(testCtx(t), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	client := func(srv *testsrv.Redis, user, password string) *redis.Client {
		opts := srv.Options()
		opts.Username, opts.Password = user, password
		c := redis.NewClient(opts)
		t.Cleanup(func() { c.Close() })
		return c
	}
	var log bytes.Buffer
	wrongPassword := newLocker(t, client(withPassword, "", "wrong"), redislock.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	lockcheck.WantRefused(t, wrongPassword, lockcheck.Key(t), "WRONGPASS")
	lockcheck.WantRefused(t, wrongPassword, lockcheck.Key(t), "WRONGPASS")
	if n := strings.Count(log.String(), "level=WARN"); n != 1 || !strings.Contains(log.String(), "WRONGPASS") {
		t.Errorf("two refusals logged %d warnings, want one with the server's reason:\n%s", n, log.String())
	}
	lockcheck.WantRefused(t, newLocker(t, client(withPassword, "", "")), lockcheck.Key(t), "NOAUTH")
	for name, err := range map[string]error{
		"ExtendToken":  wrongPassword.ExtendToken(testCtx(t), "k", "t", time.Second),
		"ReleaseToken": wrongPassword.ReleaseToken(testCtx(t), "k", "t"),
	} {
		lockcheck.WantError(t, err, dlock.ErrMisconfigured)
		if !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("%s: %q, want the server's reason", name, err)
		}
	}

	srv := testsrv.StartRedis(t)
	raw := srv.Client(t)
	if err := raw.Do(testCtx(t), "ACL", "SETUSER", "app", "on", ">pw", "~locks:*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	// Allowed the lock keys but not dlock's own.
	lockcheck.WantRefused(t, newLocker(t, client(srv, "app", "pw")), "locks:"+lockcheck.Key(t), "NOPERM")
	// A fence counter that is a list.
	key := lockcheck.Key(t)
	if err := raw.LPush(testCtx(t), keys.Fence(key), "x").Err(); err != nil {
		t.Fatal(err)
	}
	wrongType := newLocker(t, raw)
	lockcheck.WantRefused(t, wrongType, key, "WRONGTYPE")

	replica := testsrv.StartRedis(t, testsrv.RedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(srv.Port)))
	lockcheck.WantRefused(t, newLocker(t, replica.Client(t)), lockcheck.Key(t), "READONLY")

	full := testsrv.StartRedis(t)
	if err := full.Client(t).ConfigSet(testCtx(t), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	lockcheck.WantRefused(t, newLocker(t, full.Client(t)), lockcheck.Key(t), "OOM")
}
