package bench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/rnode"
	"github.com/dlock-go/dlock/redislock"
)

// Candidate release scripts for a grant made of plain commands; the
// library does not use them, TestServerCost measures them.
var (
	// relCAD is the bare compare-and-delete (raw's release).
	relCAD = redis.NewScript(`if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('del', KEYS[1])`)
	// relStore also stores the fence, nothing else.
	relStore = redis.NewScript(`if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
redis.call('set', KEYS[2], ARGV[2], 'px', ARGV[3])
return 1`)
	// relStoreQ stores the fence and pops the queue.
	relStoreQ = redis.NewScript(`if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
redis.call('set', KEYS[2], ARGV[2], 'px', ARGV[3])
local h = redis.call('zpopmin', KEYS[3])
if h[1] then redis.call('publish', 'dlock:wake:' .. h[1], KEYS[1]) return {1, 1} end
return 1`)
	// relStoreExists checks the queue with EXISTS first.
	relStoreExists = redis.NewScript(`if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
redis.call('set', KEYS[2], ARGV[2], 'px', ARGV[3])
if redis.call('exists', KEYS[3]) == 1 then
  local h = redis.call('zpopmin', KEYS[3])
  if h[1] then redis.call('publish', 'dlock:wake:' .. h[1], KEYS[1]) return {1, 1} end
end
return 1`)
	// relStoreMark stores the fence and reads the counter's old value,
	// which a waiter marks ('q' at its end) when it queues.
	relStoreMark = redis.NewScript(`if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
local old = redis.call('set', KEYS[2], ARGV[2], 'px', ARGV[3], 'get')
if old and string.byte(old, -1) == 113 then
  local h = redis.call('zpopmin', KEYS[3])
  if h[1] then redis.call('publish', 'dlock:wake:' .. h[1], KEYS[1]) return {1, 1} end
end
return 1`)
	// empty is a script that does nothing.
	empty = redis.NewScript(`return 1`)
)

// cmdStats returns INFO commandstats' calls and usec per command name.
func cmdStats(tb testing.TB, c *redis.Client) (calls, usec map[string]float64) {
	calls, usec = map[string]float64{}, map[string]float64{}
	for name, v := range infoFields(tb, c, "commandstats") {
		name, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			if x, ok := strings.CutPrefix(kv, "usec="); ok {
				usec[name], _ = strconv.ParseFloat(x, 64)
			}
			if x, ok := strings.CutPrefix(kv, "calls="); ok {
				calls[name], _ = strconv.ParseFloat(x, 64)
			}
		}
	}
	return calls, usec
}

// TestServerCost measures the server's time per uncontended cycle of the
// library, the raw protocol and candidate designs, interleaved in blocks of
// 500 cycles so that a busy machine weighs on all of them alike, and prints
// where it goes: the sum of INFO commandstats usec over the commands sent
// (a script's includes what it runs), each command's share, and the main
// thread's CPU (INFO cpu, which also counts reading and writing the
// sockets). It takes a minute or two; run it alone with BENCH_SERVERCOST=1
// go test -run TestServerCost -v (BENCH_SERVERCOST_ROUNDS sets the number
// of rounds, 20 by default), a quicker way to measure a script change than
// bench/run.sh. A command that runs both at the top level and inside a script
// (or EXEC) is counted for its top-level calls only, at its average µs
// per call: a script's own figure already includes what it runs.
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
	const fence = "1796160179336824"
	pipeGrant := func() {
		pipe := c.Pipeline()
		pipe.SetNX(ctx, key, tok, ttl*time.Millisecond)
		pipe.Time(ctx)
		pipe.Get(ctx, fk)
		_, err := pipe.Exec(ctx)
		must(err)
	}
	multiGrant := func() {
		pipe := c.TxPipeline()
		pipe.SetNX(ctx, key, tok, ttl*time.Millisecond)
		pipe.Time(ctx)
		pipe.Get(ctx, fk)
		_, err := pipe.Exec(ctx)
		must(err)
	}
	incrGrant := func() {
		pipe := c.Pipeline()
		pipe.SetNX(ctx, key, tok, ttl*time.Millisecond)
		pipe.Time(ctx)
		pipe.Incr(ctx, fk)
		pipe.PExpire(ctx, fk, fenceTTL*time.Millisecond)
		_, err := pipe.Exec(ctx)
		must(err)
	}
	type protocol struct {
		name  string
		top   map[string]float64 // top-level calls per cycle
		cycle func()
		usec  []float64
		cpu   []float64
		per   map[string][]float64 // µs/cycle per command, all calls
	}
	scriptTop := map[string]float64{"evalsha": 1}
	plus := func(m map[string]float64, kv ...any) map[string]float64 {
		out := map[string]float64{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] += kv[i+1].(float64)
		}
		return out
	}
	pipeTop := map[string]float64{"set": 1, "time": 1, "get": 1}
	multiTop := map[string]float64{"multi": 1, "exec": 1}
	ps := []*protocol{
		{name: "raw: SET NX PX, DEL", top: map[string]float64{"set": 1, "del": 1}, cycle: func() {
			must(c.SetNX(ctx, key, tok, ttl*time.Millisecond).Err())
			must(c.Del(ctx, key).Err())
		}},
		{name: "raw: SET NX PX, CAD script", top: plus(scriptTop, "set", 1.0), cycle: func() {
			must(c.SetNX(ctx, key, tok, ttl*time.Millisecond).Err())
			must(relCAD.Run(ctx, c, []string{key}, tok).Err())
		}},
		{name: "empty script x2", top: map[string]float64{"evalsha": 2}, cycle: func() {
			must(empty.Run(ctx, c, []string{key}, tok).Err())
			must(empty.Run(ctx, c, []string{key}, tok).Err())
		}},
		{name: "dlock's scripts (today)", top: map[string]float64{"evalsha": 2}, cycle: func() {
			must(rnode.AcquireScript.Run(ctx, c, []string{key, fk}, tok, ttl, fenceTTL).Err())
			must(rnode.ReleaseScript.Run(ctx, c, []string{key, qk}, tok).Err())
		}},
		{name: "pipe grant, DEL (grant alone)", top: plus(pipeTop, "del", 1.0), cycle: func() {
			pipeGrant()
			must(c.Del(ctx, key).Err())
		}},
		{name: "pipe grant, release stores", top: plus(pipeTop, "evalsha", 1.0), cycle: func() {
			pipeGrant()
			must(relStore.Run(ctx, c, []string{key, fk}, tok, fence, fenceTTL).Err())
		}},
		{name: "pipe grant, stores+ZPOPMIN", top: plus(pipeTop, "evalsha", 1.0), cycle: func() {
			pipeGrant()
			must(relStoreQ.Run(ctx, c, []string{key, fk, qk}, tok, fence, fenceTTL).Err())
		}},
		{name: "pipe grant, stores+EXISTS", top: plus(pipeTop, "evalsha", 1.0), cycle: func() {
			pipeGrant()
			must(relStoreExists.Run(ctx, c, []string{key, fk, qk}, tok, fence, fenceTTL).Err())
		}},
		{name: "pipe grant, stores GET, mark", top: plus(pipeTop, "evalsha", 1.0), cycle: func() {
			pipeGrant()
			must(relStoreMark.Run(ctx, c, []string{key, fk, qk}, tok, fence, fenceTTL).Err())
		}},
		{name: "INCR grant, DEL (grant alone)", top: map[string]float64{"set": 1, "time": 1, "incr": 1, "pexpire": 1, "del": 1}, cycle: func() {
			incrGrant()
			must(c.Del(ctx, key).Err())
		}},
		{name: "INCR grant, stores+ZPOPMIN", top: map[string]float64{"set": 1, "time": 1, "incr": 1, "pexpire": 1, "evalsha": 1}, cycle: func() {
			incrGrant()
			must(relStoreQ.Run(ctx, c, []string{key, fk, qk}, tok, fence, fenceTTL).Err())
		}},
		{name: "MULTI grant, stores+ZPOPMIN", top: plus(multiTop, "evalsha", 1.0), cycle: func() {
			multiGrant()
			must(relStoreQ.Run(ctx, c, []string{key, fk, qk}, tok, fence, fenceTTL).Err())
		}},
		{name: "MULTI grant, stores GET, mark", top: plus(multiTop, "evalsha", 1.0), cycle: func() {
			multiGrant()
			must(relStoreMark.Run(ctx, c, []string{key, fk, qk}, tok, fence, fenceTTL).Err())
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
	rounds, block := 20, 500
	if s := os.Getenv("BENCH_SERVERCOST_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
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
			if p.per == nil {
				p.per = map[string][]float64{}
			}
			var u float64
			for name := range u1 {
				du, dn := u1[name]-u0[name], n1[name]-n0[name]
				if dn == 0 || name == "info" {
					continue
				}
				p.per[name] = append(p.per[name], du/float64(block))
				if top, ok := p.top[name]; ok {
					u += du * min(1, top*float64(block)/dn)
				}
			}
			p.usec = append(p.usec, u/float64(block))
			p.cpu = append(p.cpu, (c1-c0)*1e6/float64(block))
		}
	}
	med := func(xs []float64) float64 { sort.Float64s(xs); return xs[len(xs)/2] }
	for _, p := range ps {
		var parts []string
		names := make([]string, 0, len(p.per))
		for n := range p.per {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %.2f", n, med(p.per[n])))
		}
		t.Logf("%-36s server µs/cycle median %.2f min %.2f  main CPU median %.2f min %.2f  | %s",
			p.name, med(p.usec), p.usec[0], med(p.cpu), p.cpu[0], strings.Join(parts, ", "))
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
