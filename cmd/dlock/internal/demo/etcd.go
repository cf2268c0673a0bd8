package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cmd/dlock/internal/etcdsrv"
	"github.com/dlock-go/dlock/cmd/dlock/internal/timeline"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/fence"
)

// etcdTTL is A's lease. It must outlast what comes between its grant and
// its extension, the leader's loss and an election among the two members
// left, also on a loaded machine and on embedded servers (1s, etcd's
// shortest, was not enough there); leases count whole seconds.
const etcdTTL = 3 * time.Second

var etcdScenario = scenario{
	title:   "etcd: the fence comes from consensus",
	short:   "etcd",
	summary: "a member down changed nothing; the paused holder's late write was refused",
	proves: []string{
		"On etcd a grant is a Raft commit on a majority of members and its fence is the cluster's",
		"revision: losing a member (even the leader) loses no lock and cannot repeat a fence, with no",
		"assumption about clocks. Exclusion is still a lease: A, paused past it, lost the lock and",
		"could not know. The fence is what made that safe: B's revision is higher, so A's write was refused.",
	},
	run: runEtcd,
}

func runEtcd(ctx context.Context, e *env, s *section) error {
	dir, err := os.MkdirTemp("", "dlock-demo-etcd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start, where, killed := etcdsrv.Start, "temporary etcd members", "killed"
	if !etcdsrv.Installed() {
		start, where, killed = etcdsrv.StartEmbedded, "etcd servers inside this process (no etcd on PATH)", "stopped"
	}
	c, err := start(ctx, dir, 3)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer c.Stop()
	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	l, err := etcdlock.New(cli, etcdlock.WithPrefix(e.prefix), etcdlock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	s.say("Three %s on %s, %s and %s (one Raft cluster).",
		where, c.Members[0].ClientAddr, c.Members[1].ClientAddr, c.Members[2].ClientAddr)
	key := "ledger"
	guard := fence.NewMemory()
	var value string

	tA := time.Now()
	lockA, err := l.TryAcquire(ctx, key, etcdTTL)
	if err != nil {
		return fmt.Errorf("holder A could not acquire: %w", err)
	}
	s.result(fmt.Sprintf("A acquires %q for %v", key, etcdTTL), fmt.Sprintf("fence %d (the revision of its key)", lockA.Fence()), true, "")

	leader, err := loseLeader(ctx, s, c, l, key, lockA, killed)
	if err != nil {
		return err
	}

	pause := etcdTTL + time.Second // past A's lease
	s.say("A stalls for %v (a GC pause) without extending; its lease expires on the cluster.", pause)
	tB := time.Now()
	wctx, cancel := context.WithTimeout(ctx, pause+10*time.Second)
	lockB, err := dlock.Acquire(wctx, l, key, 10*etcdTTL)
	cancel()
	if err != nil {
		return fmt.Errorf("holder B could not acquire after A's lease expired: %w", err)
	}
	defer lockB.Release(context.WithoutCancel(ctx))
	tGot := time.Now()
	s.result("B, waiting, gets the lock when A's lease expires", fmt.Sprintf("fence %d after %v", lockB.Fence(), tGot.Sub(tB).Round(100*time.Millisecond)),
		lockB.Fence() > lockA.Fence(), fmt.Sprintf("a fence above %d", lockA.Fence()))
	if err := sleep(ctx, time.Until(tB.Add(pause))); err != nil {
		return err
	}

	err = guard.Write("ledger", lockB.Fence(), lockB.Token(), func() error { value = "B"; return nil })
	s.result(fmt.Sprintf("B writes with fence %d", lockB.Fence()), accepted(err), err == nil, "accepted")
	tWA := time.Now()
	err = guard.Write("ledger", lockA.Fence(), lockA.Token(), func() error { value = "A"; return nil })
	s.result(fmt.Sprintf("A wakes up and writes with fence %d", lockA.Fence()), accepted(err), errors.Is(err, fence.ErrStale), "rejected (ErrStale)")
	s.result("value of the resource", fmt.Sprintf("%q", value), value == "B", `"B"`)
	err = lockA.Extend(ctx, etcdTTL)
	s.result("A tries to extend", outcome(err), errors.Is(err, dlock.ErrLockLost) || errors.Is(err, dlock.ErrNotHeld), "refused")

	if err := c.Restart(leader); err != nil {
		return fmt.Errorf("restart %s: %w", leader.Name, err)
	}
	s.say("%s restarts with its data and catches up; B's lock was never in doubt.", leader.Name)

	a, b := e.scene+"etcd: A", e.scene+"etcd: B"
	e.tl.Bar(a, tA, tB, timeline.Held, "A holds the lock; the leader is killed")
	e.tl.Bar(a, tB, tWA, timeline.Paused, "A stalls; its lease expires")
	e.tl.Bar(b, tGot, tWA, timeline.Held, "B holds the lock")
	e.tl.Mark(a, tWA, timeline.Rejected, fmt.Sprintf("A's late write with fence %d: rejected", lockA.Fence()))
	return nil
}

// loseLeader kills the cluster's leader and shows that A's lock lives on:
// A extends it, B cannot take it. It returns the member killed.
func loseLeader(ctx context.Context, s *section, c *etcdsrv.Cluster, l *etcdlock.Locker, key string, lockA *dlock.Lock, killed string) (*etcdsrv.Member, error) {
	leader := leaderOf(ctx, c)
	leader.Kill()
	s.say("The leader, %s, is %s: a minority of the cluster is down.", leader.Name, killed)
	if err := c.WaitHealthy(ctx, 10*time.Second); err != nil {
		return nil, fmt.Errorf("the two members left elected no leader: %w", err)
	}
	// A call in flight to the old leader can fail while the others take
	// over: A retries while its lock is valid, as Do does.
	err := lockA.Extend(ctx, etcdTTL)
	for errors.Is(err, dlock.ErrUnavailable) && lockA.Held() && sleep(ctx, 100*time.Millisecond) == nil {
		err = lockA.Extend(ctx, etcdTTL)
	}
	s.result("A extends its lock", outcome(err), err == nil, "ok")
	_, err = l.TryAcquire(ctx, key, etcdTTL)
	s.result("B tries to take it", acquired(err), errors.Is(err, dlock.ErrNotAcquired), "ErrNotAcquired")
	return leader, nil
}

// leaderOf returns the member that leads the cluster (the first one when
// none says so).
func leaderOf(ctx context.Context, c *etcdsrv.Cluster) *etcdsrv.Member {
	cli, err := c.Client()
	if err == nil {
		defer cli.Close()
		for _, m := range c.Members {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := cli.Status(sctx, m.ClientURL)
			cancel()
			if err == nil && st.Leader == st.Header.MemberId {
				return m
			}
		}
	}
	return c.Members[0]
}
