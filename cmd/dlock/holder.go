package main

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/keys"
	"github.com/dlock-go/dlock/internal/scripts"
)

// holderInfo is what `dlock run` publishes about itself in keys.Holder(key)
// and what `dlock inspect` shows. It is informational only: the lock key and
// its token decide who holds the lock.
type holderInfo struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Service string    `json:"service,omitempty"`
	Since   time.Time `json:"since"`
}

// holderPub keeps the holder key alive while the lock is held: written with
// the lock's TTL, refreshed every third of it, deleted (if still ours) at
// the end. Every write is best effort; a missing holder key only makes
// inspect show less.
type holderPub struct {
	clients []redis.UniversalClient
	key     string
	value   string
	ttl     time.Duration
	ctx     context.Context
	stopped chan struct{}
	wg      sync.WaitGroup
}

func publishHolder(ctx context.Context, clients []redis.UniversalClient, lockKey string, ttl time.Duration) *holderPub {
	host, _ := os.Hostname()
	v, _ := json.Marshal(holderInfo{Host: host, PID: os.Getpid(), Since: time.Now().UTC().Truncate(time.Millisecond)})
	p := &holderPub{
		clients: clients,
		key:     keys.Holder(lockKey),
		value:   string(v),
		ttl:     ttl,
		ctx:     context.WithoutCancel(ctx),
		stopped: make(chan struct{}),
	}
	p.write()
	p.wg.Add(1)
	go p.refresh()
	return p
}

func (p *holderPub) timeout() time.Duration {
	return min(max(p.ttl/3, 50*time.Millisecond), 2*time.Second)
}

func (p *holderPub) write() {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout())
	defer cancel()
	for _, c := range p.clients {
		_ = c.Set(ctx, p.key, p.value, p.ttl).Err()
	}
}

func (p *holderPub) refresh() {
	defer p.wg.Done()
	t := time.NewTicker(max(p.ttl/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.stopped:
			return
		case <-t.C:
			p.write()
		}
	}
}

// stop ends the refreshing and deletes the holder key where it still holds
// our value (a later holder may have written its own).
func (p *holderPub) stop() {
	if p == nil {
		return
	}
	close(p.stopped)
	p.wg.Wait()
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout())
	defer cancel()
	for _, c := range p.clients {
		_ = scripts.Release.Run(ctx, c, []string{p.key}, p.value).Err()
	}
}
