// Package tcpproxy is a small in-process TCP relay that can misbehave on
// cue: delay replies, go silent (a partition that sends no RST), drop every
// connection, or refuse for good. `dlock demo` cuts a user's server off
// through it without touching the server; `dlock torture` puts one in front
// of every lock server for each worker.
//
// The tests use it through internal/testkit/testproxy. It is deliberately tiny
// instead of toxiproxy: the library module should not require toxiproxy's
// dependencies for five behaviours.
package tcpproxy

import (
	"context"
	"net"
	"sync"
	"time"
)

// DialFunc opens the connection to the target.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Proxy forwards the TCP connections it accepts on Addr to its target. Its
// methods are safe for concurrent use.
type Proxy struct {
	Addr string // where clients connect: 127.0.0.1:port

	network, target string
	dial            DialFunc
	ln              net.Listener

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	latency time.Duration // added to every chunk from the target
	silent  chan struct{} // non-nil while blackholed; closed when it ends
	held    chan struct{} // non-nil while replies are held; closed when it ends
	refused bool
	wg      sync.WaitGroup
}

// New starts a proxy on a free loopback port that forwards to target on
// network ("tcp" when empty, or "unix"), dialling with dial (a net.Dialer
// with a 1s timeout when nil).
func New(network, target string, dial DialFunc) (*Proxy, error) {
	if network == "" {
		network = "tcp"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if dial == nil {
		d := &net.Dialer{Timeout: time.Second}
		dial = d.DialContext
	}
	p := &Proxy{Addr: ln.Addr().String(), network: network, target: target, dial: dial, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			up, err := p.dial(ctx, p.network, p.target)
			cancel()
			if err != nil {
				return
			}
			if !p.track(up) {
				up.Close()
				return
			}
			defer p.untrack(up)
			done := make(chan struct{}, 2)
			go func() { p.pump(up, c, false); done <- struct{}{} }()
			go func() { p.pump(c, up, true); done <- struct{}{} }()
			<-done // either side ended: end both
			c.Close()
			up.Close()
			<-done
		}()
	}
}

// chunk is data read from one side, stamped with when it was read.
type chunk struct {
	data []byte
	read time.Time
}

// pump copies src to dst. A reader goroutine stamps each chunk, so a delay
// applies from when the data arrived and pipelined requests are not delayed
// once per chunk in turn; the writer holds chunks while the proxy is
// silent and, for replies, until their latency has passed.
func (p *Proxy) pump(dst, src net.Conn, replies bool) {
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		buf := make([]byte, 16<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				// A copy of what was read (requests and replies are small):
				// the chunk waits in the channel while buf is read into again.
				chunks <- chunk{append([]byte(nil), buf[:n]...), time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		src.Close() // ends the reader if dst failed first
		for range chunks {
		}
	}()
	for c := range chunks {
		for {
			p.mu.Lock()
			silent, latency := p.silent, p.latency
			if silent == nil && replies {
				silent = p.held
			}
			p.mu.Unlock()
			if silent == nil {
				if d := time.Until(c.read.Add(latency)); replies && d > 0 {
					time.Sleep(d)
					continue // the proxy may have gone silent meanwhile
				}
				break
			}
			<-silent
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refused {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// SetLatency delays every reply (data from the target) by d from when it
// arrived; 0 removes the delay.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Blackhole makes the proxy silent (on) or forwarding again (off). While
// silent it accepts connections and data but forwards nothing in either
// direction and sends no RST, as a network that drops packets; when it
// forwards again, what it held is delivered late, as TCP retransmission
// would.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.silent == nil:
		p.silent = make(chan struct{})
	case !on && p.silent != nil:
		close(p.silent)
		p.silent = nil
	}
}

// HoldReplies makes the proxy keep what the target sends (on), while it
// still forwards requests: the server acts and the client never learns the
// outcome, as when the network drops everything on the way back. Off
// delivers what it held, late.
func (p *Proxy) HoldReplies(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.held == nil:
		p.held = make(chan struct{})
	case !on && p.held != nil:
		close(p.held)
		p.held = nil
	}
}

// Reset closes every connection through the proxy (data in flight is lost)
// and keeps accepting new ones.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Cut refuses for good: it closes the listener and every connection, so the
// target looks gone (connection refused), as in a partition that lasts.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refused {
		return
	}
	p.refused = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	for _, ch := range []*chan struct{}{&p.silent, &p.held} {
		if *ch != nil {
			close(*ch) // writers waiting on it find their connection closed
			*ch = nil
		}
	}
}

// Close cuts the proxy and waits for its goroutines to end.
func (p *Proxy) Close() {
	p.Cut()
	p.wg.Wait()
}
