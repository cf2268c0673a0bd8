// Package backend is what the backends of this repository configure and
// check the same way: the options they share and the checks of their
// arguments. Each Locker keeps a Config; its With... options are short
// bodies over Config's setters, so each rule is written once.
package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/bridge"
	"github.com/dlock-go/dlock/internal/holder"
	"github.com/dlock-go/dlock/internal/keys"
)

// Config is a Locker's share of the common options, and its events.
type Config struct {
	Prefix      string        // prepended to every lock key (WithPrefix)
	DriftFactor float64       // the TTL's share set aside for clock drift
	NoDrift     bool          // validity sets no margin aside (pglock's session locks)
	FenceTTL    time.Duration // how long a fence counter outlives its last write
	HolderHead  string        // the holder record up to "since" (holder.Head); "": none
	Logger      *slog.Logger
	Events      driver.Events // the logger's and the observers', once Done

	observers []func(context.Context, dlock.Event)
	reserved  string // the namespace of dlock's own keys, where no lock key may lie; "": none
}

// FenceTTL is the default of the Redis backends' WithFenceTTL: how long a
// key's fence counter outlives the last write to it.
const FenceTTL = time.Hour

// New returns a Config with the defaults (fenceTTL, slog.Default()). With
// reserved, lock keys (prefix and key) may not lie in dlock's own
// namespace.
func New(fenceTTL time.Duration, reserved bool) Config {
	c := Config{DriftFactor: bridge.DefaultDriftFactor, FenceTTL: fenceTTL, Logger: slog.Default()}
	if reserved {
		c.reserved = keys.Reserved
	}
	return c
}

// Apply applies a backend's options to its Locker l, refusing a nil one.
func Apply[L any, O ~func(L) error](l L, opts []O) error {
	for _, o := range opts {
		if o == nil {
			return bridge.Invalidf("nil option")
		}
		if err := o(l); err != nil {
			return err
		}
	}
	return nil
}

// Done builds the Events of a Locker of backend, once its options are set.
func (c *Config) Done(backend string) { c.Events = driver.NewEvents(backend, c.Logger, c.observers...) }

// SetPrefix and the setters after it set the options of the same names
// (WithPrefix, ...), each refusing the values its option's doc refuses.
func (c *Config) SetPrefix(prefix string) error {
	if c.reserved != "" && strings.HasPrefix(prefix, c.reserved) {
		return bridge.Invalidf("prefix %q: the %q namespace is reserved for dlock's own keys", prefix, c.reserved)
	}
	c.Prefix = prefix
	return nil
}

func (c *Config) SetDriftFactor(f float64) error {
	if !(f >= 0 && f < 1) {
		return bridge.Invalidf("drift factor %v: must be in [0, 1)", f)
	}
	c.DriftFactor = f
	return nil
}

func (c *Config) SetLogger(logger *slog.Logger) error {
	if logger == nil {
		return bridge.Invalidf("nil logger")
	}
	c.Logger = logger
	return nil
}

func (c *Config) AddObserver(observe func(ctx context.Context, e dlock.Event)) error {
	if observe == nil {
		return bridge.Invalidf("nil observer")
	}
	c.observers = append(c.observers, observe)
	return nil
}

// SetHolderInfo turns WithHolderInfo's record on; service may be empty.
func (c *Config) SetHolderInfo(service string) error {
	c.HolderHead = holder.Head(service)
	return nil
}

// SetFenceTTL's d must lie between least and bridge.MaxTTL.
func (c *Config) SetFenceTTL(d, least time.Duration) error {
	if d < least || d > bridge.MaxTTL {
		return bridge.Invalidf("fence ttl %v: must be between %v and %v", d, least, bridge.MaxTTL)
	}
	c.FenceTTL = d
	return nil
}

// CheckKey refuses an empty key, and one that would put the lock key
// (prefix and key) inside the reserved namespace: releasing
// "dlock:fence:{foo}" would reset foo's fences.
func (c *Config) CheckKey(key string) error {
	if err := bridge.CheckKey(key); err != nil {
		return err
	}
	if c.reserved != "" && strings.HasPrefix(c.Prefix+key, c.reserved) {
		return bridge.Invalidf("lock key %q: the %q namespace is reserved for dlock's own keys", c.Prefix+key, c.reserved)
	}
	return nil
}

// CheckTTL refuses a TTL that no backend honours or, unless NoDrift, that
// leaves no validity after the drift margin.
func (c *Config) CheckTTL(ttl time.Duration) error {
	if c.NoDrift {
		return bridge.CheckTTL(ttl)
	}
	return bridge.CheckValidity(ttl, c.DriftFactor)
}

// Check and the checks after it refuse the arguments of an attempt
// (Check), a semaphore's (CheckPermit), SetLimit (CheckLimit), a read of
// one key (CheckRead: ReadTerm) and an operation that takes a token
// instead of a handle (CheckToken). Each refuses the first bad argument,
// in order.
func (c *Config) Check(ctx context.Context, key string, ttl time.Duration) error {
	return cmp.Or(c.CheckRead(ctx, key), c.CheckTTL(ttl))
}

func (c *Config) CheckPermit(ctx context.Context, name string, ttl time.Duration, limit int) error {
	return cmp.Or(bridge.CheckLimit(limit), c.Check(ctx, name, ttl))
}

func (c *Config) CheckLimit(ctx context.Context, name string, limit int) error {
	return cmp.Or(bridge.CheckLimit(limit), c.CheckRead(ctx, name))
}

func (c *Config) CheckRead(ctx context.Context, key string) error {
	if ctx == nil {
		return bridge.Invalidf("nil context")
	}
	return c.CheckKey(key)
}

func (c *Config) CheckToken(ctx context.Context, key, token string) error {
	if err := c.CheckRead(ctx, key); err != nil || token != "" {
		return err
	}
	return bridge.Invalidf("empty token")
}

// LimitConflict is the error of an attempt on name's semaphore with limit
// ours where the servers recorded another: ErrInvalid, as no wait can
// change it.
func LimitConflict(name string, server, ours int) error {
	return fmt.Errorf("dlock: acquire %q: %w: limit conflict: the server has %d, this Locker %d (change it with dlock.SetLimit)",
		name, dlock.ErrInvalid, server, ours)
}

// DefaultInspectLimit is how many locks Inspect returns when asked for no
// bound (limit 0).
const DefaultInspectLimit = 1000

// CheckInspect checks the arguments of Inspect and returns the pattern
// ("*" for ""), its matcher and the bound (DefaultInspectLimit for 0). The
// pattern is a glob as Redis reads one (* any text, slashes included, ?
// one character, [...] a class, [!...] its complement, \ quotes), so that
// it lists the same names on every backend.
func CheckInspect(ctx context.Context, pattern string, limit int) (string, *regexp.Regexp, int, error) {
	switch {
	case ctx == nil:
		return "", nil, 0, bridge.Invalidf("nil context")
	case limit < 0:
		return "", nil, 0, bridge.Invalidf("inspect limit %d: must not be negative", limit)
	case limit == 0:
		limit = DefaultInspectLimit
	}
	if pattern == "" {
		pattern = "*"
	}
	match, err := globRegexp(pattern)
	if err != nil {
		return "", nil, 0, bridge.Invalidf("inspect pattern %q: %v", pattern, err)
	}
	return pattern, match, limit, nil
}

// globRegexp compiles a Redis-style glob to an anchored regexp.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^`)
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			b.WriteString(`(?s:.*)`)
		case '?':
			b.WriteString(`(?s:.)`)
		case '\\':
			if i+1 < len(glob) {
				i++
			}
			b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
		case '[':
			end := strings.IndexByte(glob[i+1:], ']')
			if end < 0 {
				return nil, errors.New("unclosed [")
			}
			class := glob[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`$`)
	return regexp.Compile(b.String())
}

// Reread calls read, a TermReader's, until its answer is complete (it did
// not catch a grant before its record was written), at most 1+n times, a
// millisecond apart, and returns its last answer.
func Reread(ctx context.Context, n int, read func() (t dlock.Term, pending bool, err error)) (dlock.Term, error) {
	for i := 0; ; i++ {
		t, pending, err := read()
		if !pending || i == n || !Sleep(ctx, time.Millisecond) {
			return t, err
		}
	}
}

// Sleep waits d, or less when ctx ends first (then it returns false).
func Sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
