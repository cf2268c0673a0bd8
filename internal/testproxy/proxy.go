// Package testproxy puts an in-process TCP proxy (toxiproxy, used as a
// library) in front of a test server, to inject latency, silent partitions
// and lost replies. It is its own package so that the dlock binary, which
// uses testsrv to start demo servers, does not carry toxiproxy.
package testproxy

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/testsrv"
)

// Proxy is an in-process TCP proxy (toxiproxy used as a library) in front of
// a server, for injecting latency, silent partitions and cut connections.
type Proxy struct {
	Addr  string // where clients connect
	proxy *toxiproxy.Proxy
}

var proxySeq atomic.Int64

// IgnoreLeaks is the goleak option for toxiproxy's own link goroutines,
// which can outlive Stop by a moment while a toxic finishes a pipe write
// that nobody reads any more. They belong to the test tool, not to dlock.
var IgnoreLeaks = goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run")

// Start starts a proxy on a free loopback port that forwards to upstream,
// and stops it when the test ends.
func Start(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var lastErr error
	for range 5 {
		port, err := testsrv.FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p := toxiproxy.NewProxy(server, fmt.Sprintf("proxy%d", proxySeq.Add(1)), addr, upstream)
		if lastErr = p.Start(); lastErr == nil {
			tb.Cleanup(p.Stop)
			return &Proxy{Addr: addr, proxy: p}
		}
	}
	tb.Fatalf("start proxy to %s: %v", upstream, lastErr)
	return nil
}

func (p *Proxy) add(tb testing.TB, typ, stream string, attrs string) {
	tb.Helper()
	js := fmt.Sprintf(`{"type":%q,"stream":%q,"toxicity":1,"attributes":{%s}}`, typ, stream, attrs)
	if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		tb.Fatalf("add %s toxic: %v", typ, err)
	}
}

// Latency delays every reply (server to client) by d plus up to jitter.
func (p *Proxy) Latency(tb testing.TB, d, jitter time.Duration) {
	p.add(tb, "latency", "downstream", fmt.Sprintf(`"latency":%d,"jitter":%d`, d.Milliseconds(), jitter.Milliseconds()))
}

// HoldReplies lets requests through but never delivers the replies, as when
// the network drops everything on the way back: the server acts, the client
// never learns the outcome.
func (p *Proxy) HoldReplies(tb testing.TB) {
	p.add(tb, "timeout", "downstream", `"timeout":0`)
}

// Blackhole makes the link silent in both directions (no RST): a partition.
func (p *Proxy) Blackhole(tb testing.TB) {
	p.add(tb, "timeout", "upstream", `"timeout":0`)
	p.add(tb, "timeout", "downstream", `"timeout":0`)
}

// Heal removes every toxic.
func (p *Proxy) Heal() { p.proxy.Toxics.ResetToxics(context.Background()) }

// Cut closes every connection through the proxy (data in flight is lost)
// and removes every toxic; new connections are accepted again at once.
func (p *Proxy) Cut(tb testing.TB) {
	tb.Helper()
	p.proxy.Stop()
	p.Heal()
	if err := p.proxy.Start(); err != nil {
		tb.Fatalf("restart proxy: %v", err)
	}
}
