package etcdlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/etcdlock/internal/etcdtest"
)

// candidate is one campaigner of BenchmarkHandoff, on a client of its own.
type candidate struct {
	led    chan time.Time // when it began to lead
	resign func()         // give the leadership up
	crash  func()         // vanish without a word: close the client
	stop   func()         // end whatever is left, after the measure
}

// handoffTTL is the lease of both kinds of candidates: etcd's shortest.
const handoffTTL = time.Second

// dlockCandidate campaigns with dlock.Lead on etcdlock.
func dlockCandidate(b *testing.B, c *etcdtest.Cluster, name string) *candidate {
	cli := c.Client(b)
	l, err := etcdlock.New(cli, etcdlock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	resigned := make(chan struct{})
	done := make(chan struct{})
	cd := &candidate{led: make(chan time.Time, 1)}
	go func() {
		defer close(done)
		_ = dlock.Lead(ctx, l, name, handoffTTL, func(ctx context.Context) error {
			cd.led <- time.Now()
			select {
			case <-resigned:
			case <-ctx.Done():
			}
			return nil
		}, dlock.WithRecampaign(false), dlock.WithRetryDelay(time.Second))
	}()
	cd.resign = func() { close(resigned) }
	cd.crash = func() { cli.Close() }
	cd.stop = func() { cancel(); <-done; l.Close() }
	return cd
}

// etcdCandidate campaigns with etcd's concurrency.Election.
func etcdCandidate(b *testing.B, c *etcdtest.Cluster, name string) *candidate {
	cli := c.Client(b)
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(handoffTTL/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	e := concurrency.NewElection(s, name)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	cd := &candidate{led: make(chan time.Time, 1)}
	go func() {
		defer close(done)
		if e.Campaign(ctx, "x") == nil {
			cd.led <- time.Now()
		}
	}()
	cd.resign = func() { _ = e.Resign(context.Background()) }
	cd.crash = func() { cli.Close() }
	cd.stop = func() { cancel(); <-done; s.Close() }
	return cd
}

// BenchmarkHandoff measures how long the leadership of an election takes
// to change hands on a 1-member cluster, from the leader's resignation, or
// from its crash (its client closed: its lease is left to expire), to the
// moment the waiting candidate leads: for dlock.Lead on etcdlock and for
// etcd's concurrency.Election, both with a lease of 1s. It reports the
// median and the largest hand-off. Run it with
//
//	go test -run '^$' -bench Handoff -benchtime 20x ./etcdlock
func BenchmarkHandoff(b *testing.B) {
	c := etcdtest.Start(b, 1)
	admin := c.Client(b)
	kinds := []struct {
		name string
		new  func(*testing.B, *etcdtest.Cluster, string) *candidate
	}{{"dlock", dlockCandidate}, {"concurrency.Election", etcdCandidate}}
	for _, k := range kinds {
		for _, how := range []string{"resign", "crash"} {
			b.Run(k.name+"/"+how, func(b *testing.B) {
				var ds []time.Duration
				for i := range b.N {
					name := fmt.Sprintf("handoff-%s-%s-%d", k.name, how, i)
					ds = append(ds, handoff(b, admin, c, name, k.new, how))
				}
				slices.Sort(ds)
				b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, "max-ms")
			})
		}
	}
}

// handoff elects a leader, queues a second candidate behind it, and times
// the hand-off from the leader's resignation or crash.
func handoff(b *testing.B, admin *clientv3.Client, c *etcdtest.Cluster, name string,
	newCandidate func(*testing.B, *etcdtest.Cluster, string) *candidate, how string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := newCandidate(b, c, name)
	defer first.stop()
	<-first.led
	next := newCandidate(b, c, name)
	defer next.stop()
	for { // the next candidate's key is queued behind the leader's
		resp, err := admin.Get(ctx, name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		if resp.Count >= 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// A waiter in production has waited a while: its watch is in place.
	// (etcd syncs a watch that starts at a past revision only every
	// 100ms, which a resignation right after the waiter queued would
	// measure instead.)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if how == "resign" {
		first.resign()
	} else {
		first.crash()
	}
	select {
	case t := <-next.led:
		return t.Sub(start)
	case <-ctx.Done():
		b.Fatalf("%s: the next candidate never led", name)
		return 0
	}
}
