// Package backend is what the backends of this repository configure and
// check the same way: the options they share and the checks of their
// arguments. Each Locker keeps a Config; its With... options are short
// bodies over Config's setters, so each rule is written once.
package backend

import (
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
	"github.com/dlock-go/dlock/internal/nodeerr"
)

// Config is a Locker's share of the common options, and its events.
type Config struct {
	Prefix      string        // prepended to every lock key (WithPrefix)
	DriftFactor float64       // the TTL's share set aside for clock drift
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
			return nodeerr.Invalidf("nil option")
		}
		if err := o(l); err != nil {
			return err
		}
	}
	return nil
}

// Done builds the Events of a Locker of backend, once the options are
// applied.
func (c *Config) Done(backend string) { c.Events = driver.NewEvents(backend, c.Logger, c.observers...) }

// SetPrefix sets WithPrefix's prefix, refusing one in the reserved namespace.
func (c *Config) SetPrefix(prefix string) error {
	if c.reserved != "" && strings.HasPrefix(prefix, c.reserved) {
		return nodeerr.Invalidf("prefix %q: the %q namespace is reserved for dlock's own keys", prefix, c.reserved)
	}
	c.Prefix = prefix
	return nil
}

// SetDriftFactor sets WithDriftFactor's factor, which must be in [0, 1).
func (c *Config) SetDriftFactor(f float64) error {
	if !(f >= 0 && f < 1) {
		return nodeerr.Invalidf("drift factor %v: must be in [0, 1)", f)
	}
	c.DriftFactor = f
	return nil
}

// SetLogger sets the logger (WithLogger), refusing nil.
func (c *Config) SetLogger(logger *slog.Logger) error {
	if logger == nil {
		return nodeerr.Invalidf("nil logger")
	}
	c.Logger = logger
	return nil
}

// AddObserver adds an observer (WithObserver), refusing nil.
func (c *Config) AddObserver(observe func(ctx context.Context, e dlock.Event)) error {
	if observe == nil {
		return nodeerr.Invalidf("nil observer")
	}
	c.observers = append(c.observers, observe)
	return nil
}

// SetHolderInfo turns WithHolderInfo's record on; service may be empty.
func (c *Config) SetHolderInfo(service string) error {
	c.HolderHead = holder.Head(service)
	return nil
}

// SetFenceTTL sets WithFenceTTL's TTL, between least and bridge.MaxTTL.
func (c *Config) SetFenceTTL(d, least time.Duration) error {
	if d < least || d > bridge.MaxTTL {
		return nodeerr.Invalidf("fence ttl %v: must be between %v and %v", d, least, bridge.MaxTTL)
	}
	c.FenceTTL = d
	return nil
}

// CheckKey refuses an empty key, and one that would put the lock key
// (prefix and key) inside the reserved namespace: releasing
// "dlock:fence:{foo}" would reset foo's fences.
func (c *Config) CheckKey(key string) error {
	if err := nodeerr.Invalid(bridge.KeyProblem(key)); err != nil {
		return err
	}
	if c.reserved != "" && strings.HasPrefix(c.Prefix+key, c.reserved) {
		return nodeerr.Invalidf("lock key %q: the %q namespace is reserved for dlock's own keys", c.Prefix+key, c.reserved)
	}
	return nil
}

// CheckTTL refuses a TTL that no backend honours or that leaves no
// validity after the drift margin.
func (c *Config) CheckTTL(ttl time.Duration) error {
	return nodeerr.Invalid(bridge.ValidityProblem(ttl, c.DriftFactor))
}

// Check refuses the arguments of an attempt.
func (c *Config) Check(ctx context.Context, key string, ttl time.Duration) error {
	if err := c.CheckRead(ctx, key); err != nil {
		return err
	}
	return c.CheckTTL(ttl)
}

// CheckPermit refuses the arguments of a semaphore's attempt: a bad limit,
// then what Check refuses.
func (c *Config) CheckPermit(ctx context.Context, name string, ttl time.Duration, limit int) error {
	if err := nodeerr.Invalid(bridge.LimitProblem(limit)); err != nil {
		return err
	}
	return c.Check(ctx, name, ttl)
}

// CheckLimit refuses the arguments of SetLimit: a bad limit, then what
// CheckRead refuses.
func (c *Config) CheckLimit(ctx context.Context, name string, limit int) error {
	if err := nodeerr.Invalid(bridge.LimitProblem(limit)); err != nil {
		return err
	}
	return c.CheckRead(ctx, name)
}

// CheckRead refuses the arguments of a read of one key (ReadTerm): a nil
// ctx or a bad key.
func (c *Config) CheckRead(ctx context.Context, key string) error {
	if ctx == nil {
		return nodeerr.Invalidf("nil context")
	}
	return c.CheckKey(key)
}

// CheckToken refuses the arguments of an operation that takes a token
// instead of a handle: what CheckRead refuses, or an empty token.
func (c *Config) CheckToken(ctx context.Context, key, token string) error {
	if err := c.CheckRead(ctx, key); err != nil {
		return err
	}
	if token == "" {
		return nodeerr.Invalidf("empty token")
	}
	return nil
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
		return "", nil, 0, nodeerr.Invalidf("nil context")
	case limit < 0:
		return "", nil, 0, nodeerr.Invalidf("inspect limit %d: must not be negative", limit)
	case limit == 0:
		limit = DefaultInspectLimit
	}
	if pattern == "" {
		pattern = "*"
	}
	match, err := globRegexp(pattern)
	if err != nil {
		return "", nil, 0, nodeerr.Invalidf("inspect pattern %q: %v", pattern, err)
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
