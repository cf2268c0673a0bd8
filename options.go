package dlock

import (
	"context"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlock-go/dlock/internal/bridge"
)

// Option configures Acquire, Do and the elections built on them (Lead,
// Campaign, Observe). Options that concern only Do (the extension
// threshold and the hold limit) are ignored by Acquire, and those that
// concern only elections (WithRecampaign) by Acquire and Do.
type Option func(*config) error

// RetryForever, passed to WithRetryCount, makes Acquire wait until its
// context ends.
const RetryForever = -1

type config struct {
	retryCount  int           // attempts after the first; RetryForever = until ctx ends
	retryDelay  time.Duration // base delay between attempts
	retryJitter time.Duration // random extra delay in [0, jitter)

	extendThreshold time.Duration // Do: extend when this much validity is left; 0 = half the TTL
	maxHold         time.Duration // Do: stop extending after this long; 0 = no limit

	identity   string // published with each grant (driver.Identity); "" = none
	stopOnLoss bool   // Lead: return a loss instead of campaigning again
}

// newConfig refuses a nil ctx or l and applies opts over the defaults.
func newConfig(ctx context.Context, l Locker, opts []Option) (config, error) {
	if err := checkCall(ctx, l, "", ""); err != nil {
		return config{}, err
	}
	c := config{retryCount: RetryForever, retryDelay: 50 * time.Millisecond, retryJitter: 50 * time.Millisecond}
	for _, o := range opts {
		if o == nil {
			return c, bridge.Invalidf("nil option")
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithRetryCount sets how many more attempts Acquire makes after the first
// one fails because the lock is busy or the backend could not be reached.
// 0 makes Acquire a single try. The default is RetryForever: wait until the
// context ends.
func WithRetryCount(n int) Option {
	return func(c *config) error {
		if n < RetryForever {
			return bridge.Invalidf("retry count %d: must be >= 0 or RetryForever", n)
		}
		c.retryCount = n
		return nil
	}
}

// WithRetryDelay sets the base delay between attempts: only the fallback
// poll interval on backends that announce releases. The default is 50ms.
func WithRetryDelay(d time.Duration) Option {
	return duration("retry delay", d, true, func(c *config) *time.Duration { return &c.retryDelay })
}

// WithRetryJitter adds a random delay in [0, d) to every wait, so that
// contenders that failed together do not retry together. The default is
// 50ms.
func WithRetryJitter(d time.Duration) Option {
	return duration("retry jitter", d, true, func(c *config) *time.Duration { return &c.retryJitter })
}

// WithExtendThreshold makes Do extend the lock when no more than d of its
// validity is left (node-redlock's automaticExtensionThreshold). It must be
// below the TTL; leave enough for a round trip and a retry. The default is
// half the TTL.
func WithExtendThreshold(d time.Duration) Option {
	return duration("extend threshold", d, false, func(c *config) *time.Duration { return &c.extendThreshold })
}

// WithMaxHold caps how long Do keeps a lock by auto-extension. Once the next
// extension would carry the lock past d after it was acquired, Do stops
// extending and cancels the function's context with ErrLockLost when the
// validity runs out, so a stuck function cannot hold a lock forever. The
// default is no limit.
func WithMaxHold(d time.Duration) Option {
	return duration("max hold", d, false, func(c *config) *time.Duration { return &c.maxHold })
}

// WithIdentity sets the identity that each grant publishes (see
// driver.Identity), so that Leader and Observe can name the leader of an
// election. id must be 1 to 128 bytes of printable UTF-8; a backend may
// accept less (pglock: 42 bytes of printable ASCII, what PostgreSQL's
// application_name leaves beside the term) and then refuses the attempt
// with ErrInvalid. Lead and Campaign default to "host:pid" (the host
// name's first 32 bytes); Acquire and Do publish no identity unless given
// one.
func WithIdentity(id string) Option {
	return func(c *config) error {
		if err := checkIdentity(id); err != nil {
			return err
		}
		c.identity = id
		return nil
	}
}

// WithRecampaign sets what Lead and a Candidate do when their leadership
// is lost: campaign again, for a new term (on), or return the loss (off).
// The default is on. Acquire and Do ignore it.
func WithRecampaign(on bool) Option {
	return func(c *config) error {
		c.stopOnLoss = !on
		return nil
	}
}

// duration is an Option that sets the field of c that field returns to d,
// which must be positive, or may be 0 if zeroOK.
func duration(what string, d time.Duration, zeroOK bool, field func(*config) *time.Duration) Option {
	return func(c *config) error {
		switch {
		case zeroOK && d < 0:
			return bridge.Invalidf("%s %v: must not be negative", what, d)
		case !zeroOK && d <= 0:
			return bridge.Invalidf("%s %v: must be positive", what, d)
		}
		*field(c) = d
		return nil
	}
}

// maxIdentity is the longest identity WithIdentity accepts, in bytes.
const maxIdentity = 128

func checkIdentity(id string) error {
	switch {
	case id == "":
		return bridge.Invalidf("empty identity")
	case len(id) > maxIdentity:
		return bridge.Invalidf("identity %.40q...: %d bytes, more than the %d allowed", id, len(id), maxIdentity)
	case !utf8.ValidString(id) || strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return bridge.Invalidf("identity %q: only printable characters are allowed", id)
	}
	return nil
}
