// Package testproxy puts an in-process TCP proxy (internal/testkit/tcpproxy) in
// front of a test server, to inject latency, silent partitions and lost
// replies, with the test's lifetime and failure reporting.
package testproxy

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testkit/tcpproxy"
)

// Proxy is an in-process TCP proxy in front of a server, for injecting
// latency, silent partitions and cut connections.
type Proxy struct {
	Addr string // where clients connect
	p    *tcpproxy.Proxy
}

// Start starts a proxy on a free loopback port that forwards to upstream,
// and stops it when the test ends.
func Start(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	p, err := tcpproxy.New("tcp", upstream, nil)
	if err != nil {
		tb.Fatalf("start proxy to %s: %v", upstream, err)
	}
	tb.Cleanup(p.Close)
	return &Proxy{Addr: p.Addr, p: p}
}

// Latency delays every reply (server to client) by d. Jitter is not
// supported and must be 0.
func (p *Proxy) Latency(tb testing.TB, d, jitter time.Duration) {
	tb.Helper()
	if jitter != 0 {
		tb.Fatalf("testproxy: latency jitter is not supported")
	}
	p.p.SetLatency(d)
}

// HoldReplies lets requests through but never delivers the replies, as when
// the network drops everything on the way back: the server acts, the client
// never learns the outcome (until Heal delivers them late).
func (p *Proxy) HoldReplies(tb testing.TB) { p.p.HoldReplies(true) }

// Blackhole makes the link silent in both directions (no RST): a partition.
func (p *Proxy) Blackhole(tb testing.TB) { p.p.Blackhole(true) }

// Heal removes every fault: latency, held replies and the blackhole.
func (p *Proxy) Heal() {
	p.p.SetLatency(0)
	p.p.HoldReplies(false)
	p.p.Blackhole(false)
}

// Cut closes every connection through the proxy (data in flight is lost)
// and removes every fault; new connections are accepted again at once.
func (p *Proxy) Cut(tb testing.TB) {
	p.p.Reset()
	p.Heal()
}
