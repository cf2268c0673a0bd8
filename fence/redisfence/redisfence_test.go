package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/internal/fencetest"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/testkit/testsrv"
	"github.com/dlock-go/dlock/redislock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var keySeq atomic.Int64

func key(t *testing.T) string { return fmt.Sprintf("fence:%s:%d", t.Name(), keySeq.Add(1)) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newGuard(t *testing.T, c redis.Scripter) *redisfence.Guard {
	t.Helper()
	g, err := redisfence.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// redisValue adapts one key of a Guard to the shared guard contract. Peek
// reads the hash with a plain HGET, outside the guard.
type redisValue struct {
	t   *testing.T
	g   *redisfence.Guard
	raw redis.Cmdable
	key string
}

func (r *redisValue) Register(f uint64, tok string) error {
	return r.g.Register(testCtx(r.t), r.key, f, tok)
}
func (r *redisValue) Read(f uint64, tok string) (string, error) {
	v, _, err := r.g.Read(testCtx(r.t), r.key, f, tok)
	return v, err
}
func (r *redisValue) Write(f uint64, tok, v string) error {
	return r.g.Write(testCtx(r.t), r.key, f, tok, v)
}
func (r *redisValue) Peek() (string, uint64) {
	v := r.raw.HGet(testCtx(r.t), r.key, "value").Val()
	h, err := r.g.Highest(testCtx(r.t), r.key)
	if err != nil {
		r.t.Fatalf("Highest: %v", err)
	}
	return v, h
}

func contract(t *testing.T, c interface {
	redis.Scripter
	redis.Cmdable
}) {
	g := newGuard(t, c)
	fencetest.Run(t, func(t *testing.T) fencetest.Guard {
		return &redisValue{t: t, g: g, raw: c, key: key(t)}
	})
}

func TestContract(t *testing.T) {
	contract(t, testsrv.StartRedis(t).Client(t))
}

// Through a Ring (one shard) and a Cluster (three masters, keys spread over
// the slots): the guard takes go-redis's narrowest interface, Scripter.
func TestContractRing(t *testing.T) {
	srv := testsrv.StartRedis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	contract(t, ring)
}

func TestContractCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up takes a few seconds")
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testsrv.StartRedisCluster(t, 3), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	contract(t, c)
}

// Read returns the value with ok, and ok false before the first write.
func TestReadValue(t *testing.T) {
	c := testsrv.StartRedis(t).Client(t)
	g, k := newGuard(t, c), key(t)
	v, ok, err := g.Read(testCtx(t), k, 1, "A")
	if err != nil || ok || v != "" {
		t.Fatalf("read before any write: %q, %v, %v; want \"\", false, nil", v, ok, err)
	}
	if err := g.Write(testCtx(t), k, 1, "A", ""); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := g.Read(testCtx(t), k, 1, "A"); err != nil || !ok || v != "" {
		t.Fatalf("read of an empty value: %q, %v, %v; want \"\", true, nil", v, ok, err)
	}
	bin := "\x00\xff binary\r\n"
	if err := g.Write(testCtx(t), k, 2, "B", bin); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := g.Read(testCtx(t), k, 2, "B"); err != nil || !ok || v != bin {
		t.Fatalf("read: %q, %v, %v; want %q", v, ok, err, bin)
	}
	if _, _, err := g.Read(testCtx(t), k, 1, "A"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale read: got %v, want ErrStale", err)
	}
}

// The guard stores a digest of the token, never the token: the token is the
// lock's ownership proof, and may release it.
func TestTokenNotStored(t *testing.T) {
	c := testsrv.StartRedis(t).Client(t)
	g, k := newGuard(t, c), key(t)
	tok := bridge.NewToken()
	if err := g.Write(testCtx(t), k, 3, tok, "v"); err != nil {
		t.Fatal(err)
	}
	h := c.HGetAll(testCtx(t), k).Val()
	if h["fence"] != "3" || h["value"] != "v" || h["holder"] == "" {
		t.Fatalf("hash %v, want fence 3, value v and a holder digest", h)
	}
	for f, v := range h {
		if strings.Contains(v, tok) {
			t.Fatalf("field %s holds the token", f)
		}
	}
}

// Scripts run by SHA; after SCRIPT FLUSH go-redis falls back to EVAL.
func TestScriptFlush(t *testing.T) {
	c := testsrv.StartRedis(t).Client(t)
	g, k := newGuard(t, c), key(t)
	for i := uint64(1); i <= 3; i++ {
		if err := c.ScriptFlush(testCtx(t)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := g.Write(testCtx(t), k, i, "A", "v"); err != nil {
			t.Fatalf("write %d after SCRIPT FLUSH: %v", i, err)
		}
	}
	if err := c.ScriptFlush(testCtx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	if h, err := g.Highest(testCtx(t), k); err != nil || h != 3 {
		t.Fatalf("Highest after SCRIPT FLUSH: %d, %v", h, err)
	}
}

func TestBadInput(t *testing.T) {
	c := testsrv.StartRedis(t).Client(t)
	g := newGuard(t, c)
	ctx := testCtx(t)
	var nilCtx context.Context
	var nilGuard *redisfence.Guard
	_, nilClientErr := redisfence.New(nil)
	_, typedNilErr := redisfence.New((*redis.Client)(nil))
	_, _, readNilCtx := g.Read(nilCtx, "k", 1, "A")
	_, highestNilCtx := g.Highest(nilCtx, "k")
	cases := map[string]struct {
		err  error
		want string // what the message must name
	}{
		"nil client":       {nilClientErr, "nil redis client"},
		"typed nil client": {typedNilErr, "nil redis client"},
		"nil context":      {g.Write(nilCtx, "k", 1, "A", "v"), "nil context"},
		"nil context read": {readNilCtx, "nil context"},
		"nil ctx highest":  {highestNilCtx, "nil context"},
		"nil guard":        {nilGuard.Register(ctx, "k", 1, "A"), "nil Guard"},
		"empty key":        {g.Write(ctx, "", 1, "A", "v"), "empty resource"},
		"fence 0":          {g.Write(ctx, "k", 0, "A", "v"), "fence 0"},
		"empty token":      {g.Register(ctx, "k", 1, ""), "empty holder token"},
	}
	for name, c := range cases {
		if !errors.Is(c.err, dlock.ErrInvalid) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrInvalid naming %q", name, c.err, c.want)
		}
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("rejected input left %d keys on the server", n)
	}
}

// A key that is not a guard's hash, or a hash with a malformed fence, gives
// an error naming the problem, never a silent accept.
func TestForeignKey(t *testing.T) {
	c := testsrv.StartRedis(t).Client(t)
	g := newGuard(t, c)
	ctx := testCtx(t)
	c.Set(ctx, "str", "x", 0)
	c.HSet(ctx, "bad", "fence", "01")
	for k, want := range map[string]struct {
		sentinel error
		says     string
	}{"str": {dlock.ErrMisconfigured, "WRONGTYPE"}, "bad": {dlock.ErrUnavailable, "malformed fence"}} {
		err := g.Write(ctx, k, 5, "A", "v")
		var ne *dlock.NodeError
		if !errors.Is(err, want.sentinel) || !errors.As(err, &ne) || !strings.Contains(err.Error(), want.says) {
			t.Fatalf("%s: got %v, want %v with a NodeError naming %q", k, err, want.sentinel, want.says)
		}
		if errors.Is(err, fence.ErrStale) {
			t.Fatalf("%s: %v also matches ErrStale", k, err)
		}
	}
	if v := c.HGet(ctx, "bad", "fence").Val(); v != "01" {
		t.Fatalf("malformed guard changed to %q", v)
	}
}

// A server that is down: ErrUnavailable naming the node, promptly.
func TestServerDown(t *testing.T) {
	srv := testsrv.StartRedis(t)
	g := newGuard(t, srv.Client(t))
	srv.Kill()
	err := g.Write(testCtx(t), key(t), 1, "A", "v")
	var ne *dlock.NodeError
	if !errors.Is(err, dlock.ErrUnavailable) || !errors.As(err, &ne) || ne.Node != srv.Addr {
		t.Fatalf("got %v, want ErrUnavailable with NodeError for %s", err, srv.Addr)
	}
	if errors.Is(err, fence.ErrStale) || errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("%v matches a sentinel it should not", err)
	}
}

// A server that never answers: the call returns by the context deadline,
// matching both ErrUnavailable and context.DeadlineExceeded.
func TestServerFrozen(t *testing.T) {
	srv := testsrv.StartRedis(t)
	c := srv.Client(t)
	g, k := newGuard(t, c), key(t)
	if err := g.Write(testCtx(t), k, 1, "A", "v"); err != nil { // connect and load the script first
		t.Fatal(err)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := g.Read(ctx, k, 2, "B")
	took := time.Since(start)
	if !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if took > 300*time.Millisecond+700*time.Millisecond {
		t.Fatalf("returned after %v with a 300ms deadline", took)
	}
}

// The stale-holder scenario with real locks: A locks with a short TTL, registers
// its fence with a read, and stalls past the TTL; B locks (higher fence),
// reads and writes; A's late write is refused and the value is B's.
func TestSeedWithLocks(t *testing.T) {
	c := testsrv.StartRedis(t).Client(t)
	locker, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	g, res := newGuard(t, c), key(t)
	lockKey := "lock:" + res

	a, err := locker.TryAcquire(testCtx(t), lockKey, 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.Read(testCtx(t), res, a.Fence(), a.Token()); err != nil {
		t.Fatalf("A's read: %v", err)
	}
	// A stalls; wait until its key is gone rather than for a fixed time.
	b, err := dlock.Acquire(testCtx(t), locker, lockKey, 5*time.Second, dlock.WithRetryDelay(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}
	if _, _, err := g.Read(testCtx(t), res, b.Fence(), b.Token()); err != nil {
		t.Fatalf("B's read: %v", err)
	}
	// A's late write lands between B's read and B's write.
	errA := g.Write(testCtx(t), res, a.Fence(), a.Token(), "A")
	var se *fence.StaleError
	if !errors.As(errA, &se) || se.Fence != a.Fence() || se.Highest != b.Fence() {
		t.Fatalf("A's late write: got %v, want StaleError %d < %d", errA, a.Fence(), b.Fence())
	}
	if err := g.Write(testCtx(t), res, b.Fence(), b.Token(), "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if v, _, _ := g.Read(testCtx(t), res, b.Fence(), b.Token()); v != "B" {
		t.Fatalf("value %q, want B", v)
	}
}

// Several clients, many goroutines, random fences with ties, one key. The
// script is atomic, so: every fence is accepted from one holder only; in
// real time, a write accepted after another returned never carries a lower
// fence; the final value and the highest fence belong to the largest fence
// presented.
func TestConcurrentClients(t *testing.T) {
	const (
		clients   = 4
		perClient = 8
		writes    = 40
	)
	srv := testsrv.StartRedis(t)
	k := key(t)
	type rec struct {
		fence       uint64
		token       string
		invoked, ok time.Time
	}
	var (
		mu       sync.Mutex
		accepted []rec
		failures []error
		maxFence atomic.Uint64
	)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for ci := range clients {
		c := srv.Client(t)
		g := newGuard(t, c)
		for w := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok := fmt.Sprintf("c%d-w%d", ci, w)
				f := 1 + rand.Uint64N(20) // 32 draws from 20 values: ties are certain
				<-start
				for range writes {
					if rand.IntN(3) == 0 {
						f++
					}
					for m := maxFence.Load(); f > m && !maxFence.CompareAndSwap(m, f); m = maxFence.Load() {
					}
					inv := time.Now()
					err := g.Write(testCtx(t), k, f, tok, fmt.Sprintf("%d/%s", f, tok))
					done := time.Now()
					mu.Lock()
					switch {
					case err == nil:
						accepted = append(accepted, rec{f, tok, inv, done})
					case !errors.Is(err, fence.ErrStale):
						failures = append(failures, err)
					}
					mu.Unlock()
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d errors other than ErrStale, first: %v", len(failures), failures[0])
	}
	owner := map[uint64]string{}
	for _, r := range accepted {
		if o, ok := owner[r.fence]; ok && o != r.token {
			t.Fatalf("fence %d accepted from %s and from %s", r.fence, o, r.token)
		}
		owner[r.fence] = r.token
	}
	for _, x := range accepted {
		for _, y := range accepted {
			if x.ok.Before(y.invoked) && y.fence < x.fence {
				t.Fatalf("fence %d accepted after fence %d had been acknowledged", y.fence, x.fence)
			}
		}
	}
	g := newGuard(t, srv.Client(t))
	want := maxFence.Load()
	if h, err := g.Highest(testCtx(t), k); err != nil || h != want {
		t.Fatalf("Highest = %d, %v; want %d", h, err, want)
	}
	v, _, err := g.Read(testCtx(t), k, want, owner[want])
	if err != nil {
		t.Fatal(err)
	}
	if f, _, _ := strings.Cut(v, "/"); f != strconv.FormatUint(want, 10) {
		t.Fatalf("final value %q, want one written under fence %d", v, want)
	}
	t.Logf("%d of %d writes accepted, max fence %d", len(accepted), clients*perClient*writes, want)
}
