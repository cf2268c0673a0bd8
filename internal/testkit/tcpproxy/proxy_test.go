package tcpproxy

import (
	"bufio"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c, bufio.NewReader(c)}
}

// roundTrip sends a line and returns how long the echo took, or an error.
func (c *client) roundTrip(wait time.Duration) (time.Duration, error) {
	start := time.Now()
	c.c.SetDeadline(start.Add(wait))
	if _, err := c.c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	if _, err := c.r.ReadString('\n'); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func TestProxy(t *testing.T) {
	p, err := New("", echo(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p)
	if _, err := c.roundTrip(2 * time.Second); err != nil {
		t.Fatalf("forwarding: %v", err)
	}

	p.SetLatency(100 * time.Millisecond)
	if d, err := c.roundTrip(2 * time.Second); err != nil || d < 100*time.Millisecond {
		t.Fatalf("with 100ms latency: round trip %v, %v", d, err)
	}
	p.SetLatency(0)

	p.Blackhole(true)
	if _, err := c.roundTrip(200 * time.Millisecond); err == nil {
		t.Fatal("an answer came through the blackhole")
	}
	p.Blackhole(false)
	// What was held arrives late; the connection still works.
	c.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.r.ReadString('\n'); err != nil {
		t.Fatalf("held reply after the blackhole: %v", err)
	}

	p.Reset()
	if _, err := c.roundTrip(2 * time.Second); err == nil {
		t.Fatal("a reset connection still answered")
	}
	c2 := dial(t, p)
	if _, err := c2.roundTrip(2 * time.Second); err != nil {
		t.Fatalf("a new connection after Reset: %v", err)
	}

	p.Cut()
	if _, err := c2.roundTrip(2 * time.Second); err == nil {
		t.Fatal("a cut connection still answered")
	}
	if c, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a cut proxy accepted a connection")
	}
}
