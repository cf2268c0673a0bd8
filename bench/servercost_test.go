package bench

import (
	"context"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/redislock"
)

// releaseStore is a candidate release for a grant made of plain commands
// (SET NX PX, TIME and GET of the counter in one pipeline, the fence
// computed by the client): it stores the holder's fence in the counter.
// The library does not use it; TestServerCost measures it.
var releaseStore = redis.NewScript(`if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
redis.call('set', KEYS[2], ARGV[2], 'px', ARGV[3])
local h = redis.call('zpopmin', KEYS[3])
if h[1] then redis.call('publish', 'dlock:wake:' .. h[1], KEYS[1]) return {1, 1} end
return 1`)

// TestServerCost compares the server's time per uncontended cycle of
// protocols, interleaved in blocks of 500 cycles so that a busy machine
// weighs on all of them alike: the sum of INFO commandstats usec over the
// commands sent (a script's includes what it runs), and the main thread's
// CPU (INFO cpu, which also counts reading and writing the sockets). It
// takes some 30s; run it alone with BENCH_SERVERCOST=1 go test -run
// TestServerCost -v, a quicker way to measure a script change than
// bench/run.sh.
func TestServerCost(t *testing.T) {
	if os.Getenv("BENCH_SERVERCOST") == "" {
		t.Skip("set BENCH_SERVERCOST=1")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	key := freshKey("cost")
	fk, qk := keys.Fence(key), keys.Queue(key)
	const tok, ttl, fenceTTL = "0123456789abcdef0123456789abcdef", 10000, 3600000
	must := func(err error) {
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	type protocol struct {
		name  string
		top   map[string]float64 // the commands sent per cycle, whose usec count
		cycle func()
		usec  []float64
		cpu   []float64
	}
	ps := []*protocol{
		{name: "raw: SET NX PX, DEL", top: map[string]float64{"set": 1, "del": 1}, cycle: func() {
			must(c.SetNX(ctx, key, tok, ttl*time.Millisecond).Err())
			must(c.Del(ctx, key).Err())
		}},
		{name: "raw: SET NX PX, compare-and-delete", top: map[string]float64{"set": 1, "evalsha": 1}, cycle: func() {
			must(c.SetNX(ctx, key, tok, ttl*time.Millisecond).Err())
			must(rawRelease.Run(ctx, c, []string{key}, tok).Err())
		}},
		{name: "dlock's scripts (before)", top: map[string]float64{"evalsha": 2}, cycle: func() {
			must(scripts.Acquire.Run(ctx, c, []string{key, fk}, tok, ttl, fenceTTL).Err())
			must(scripts.Release.Run(ctx, c, []string{key, qk}, tok).Err())
		}},
		{name: "plain grant, release stores", top: map[string]float64{"evalsha": 1, "set": 1, "time": 1, "get": 1}, cycle: func() {
			pipe := c.Pipeline()
			pipe.SetNX(ctx, key, tok, ttl*time.Millisecond)
			pipe.Time(ctx)
			pipe.Get(ctx, fk)
			_, err := pipe.Exec(ctx)
			must(err)
			must(releaseStore.Run(ctx, c, []string{key, fk, qk}, tok, "1796160179336824", fenceTTL).Err())
		}},
	}
	lk, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	libKey := freshKey("cost-lib")
	ps = append(ps, &protocol{name: "dlock (library)", top: map[string]float64{"evalsha": 2}, cycle: func() {
		l, err := lk.TryAcquire(ctx, libKey, ttl*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		must(l.Release(ctx))
	}})
	const rounds, block = 40, 500
	for range rounds {
		for _, p := range ps {
			for range 20 {
				p.cycle()
			}
			n0, u0 := cmdStats(t, c)
			c0 := mainCPU(t, c)
			for range block {
				p.cycle()
			}
			c1 := mainCPU(t, c)
			n1, u1 := cmdStats(t, c)
			// A command sent that a script also runs counts for its
			// calls sent, at its average (the script's usec includes it).
			var u float64
			for name, top := range p.top {
				if dn := n1[name] - n0[name]; dn > 0 {
					u += (u1[name] - u0[name]) * min(1, top*block/dn)
				}
			}
			p.usec = append(p.usec, u/block)
			p.cpu = append(p.cpu, (c1-c0)*1e6/block)
		}
	}
	for _, p := range ps {
		sort.Float64s(p.usec)
		sort.Float64s(p.cpu)
		t.Logf("%-36s commandstats µs/cycle min %.2f median %.2f; main-thread CPU µs/cycle min %.2f median %.2f",
			p.name, p.usec[0], p.usec[len(p.usec)/2], p.cpu[0], p.cpu[len(p.cpu)/2])
	}
}

// mainCPU returns the server's main thread's CPU seconds (user + sys).
func mainCPU(t *testing.T, c *redis.Client) float64 {
	s, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			sum += f
		}
	}
	return sum
}
