package pglock

import (
	"context"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/bridge"
)

// WithHolderInfo makes the Locker publish the name of each lock it holds,
// for Inspect (of any process: see there which names it trusts) and
// pg_stat_activity: while the lock is held, its session's application_name
// is the lock's name (prefix included), followed by " (service)" when
// service is not empty, set by the statements that take and release the
// lock: no extra round trip.
//
// PostgreSQL keeps 63 bytes of application_name, printable ASCII only: a
// name that does not fit is not published (application_name is then the
// service alone). service must be printable ASCII; it is dropped where the
// name leaves no room for it. The default is off: the session's
// application_name is left alone.
func WithHolderInfo(service string) Option {
	return func(l *Locker) error {
		if !publishable(service) {
			return bridge.Invalidf("holder service %q: PostgreSQL's application_name keeps at most %d bytes of printable ASCII", service, maxAppName)
		}
		if strings.HasPrefix(service, "#") {
			return bridge.Invalidf("holder service %q: a leading '#' marks an election's term in application_name", service)
		}
		l.holder, l.service = true, service
		return nil
	}
}

// maxAppName is how many bytes of application_name PostgreSQL keeps
// (NAMEDATALEN - 1).
const maxAppName = 63

// publishable reports whether application_name can carry s unchanged
// (PostgreSQL replaces bytes outside printable ASCII with '?').
func publishable(s string) bool {
	return len(s) <= maxAppName && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r > '~' })
}

// appName is the application_name that publishes name (prefix included).
func (l *Locker) appName(name string) string {
	switch {
	case !publishable(name):
		return l.service
	case l.service != "" && len(name)+len(l.service)+3 <= maxAppName:
		return name + " (" + l.service + ")"
	}
	return name
}

// publishedName returns the lock name and service a holder's appName
// carries, when this Locker maps that name to id. The name may contain
// " (": every split is tried, the key decides.
func (l *Locker) publishedName(app string, id lockID) (name, service string, ok bool) {
	for end := len(app); end >= 0; end = strings.LastIndex(app[:end], " (") {
		svc := ""
		if end < len(app) {
			if !strings.HasSuffix(app, ")") {
				break
			}
			svc = app[end+2 : len(app)-1]
		}
		name, ok := strings.CutPrefix(app[:end], l.cfg.Prefix)
		if !ok {
			continue
		}
		if k, err := l.keyFunc(app[:end]); err == nil && k.valid() && id.is(k) {
			return name, svc, true
		}
	}
	return "", "", false
}

// maxIdentity is the longest identity a grant can publish beside
// "#<fence> " (a bigint has at most 19 digits).
const maxIdentity = maxAppName - 19 - 2

// identity returns the identity (driver.Identity's) of a grant made with
// ctx, refusing one application_name cannot carry beside the term.
func identity(ctx context.Context) (string, error) {
	id := driver.Identity(ctx)
	if id != "" && (!publishable(id) || len(id) > maxIdentity) {
		return "", bridge.Invalidf("identity %q: PostgreSQL's application_name leaves %d bytes of printable ASCII for it beside the term", id, maxIdentity)
	}
	return id, nil
}

// publish sets the statements of g and appends to args the two format
// strings of its application_name (see buildStatements) if it has one:
// with an identity "name (#<fence> <id>)" and "#<fence> <id>"; else
// holder info's appName, twice.
func (l *Locker) publish(g *grant, args []any) []any {
	g.st = l.stmts[1]
	if g.identity == "" && !l.holder {
		g.st = l.stmts[0]
		return args
	}
	if g.identity == "" {
		app := strings.ReplaceAll(l.appName(l.cfg.Prefix+g.name), "%", "%%")
		return append(args, app, app)
	}
	alt := "#%s " + strings.ReplaceAll(g.identity, "%", "%%")
	app := alt
	if full := l.cfg.Prefix + g.name; publishable(full) {
		app = strings.ReplaceAll(full, "%", "%%") + " (" + alt + ")"
	}
	return append(args, app, alt)
}

// parseTerm reads the term and identity in a leader's application_name
// (see publish): the whole of it, or from the first " (#" that parses
// to the final ")".
func parseTerm(app string) (fence uint64, id string, ok bool) {
	if fence, id, ok := termRecord(app); ok {
		return fence, id, true
	}
	body, closed := strings.CutSuffix(app, ")")
	for i := 0; closed; i++ {
		j := strings.Index(body[i:], " (#")
		if j < 0 {
			break
		}
		i += j
		if fence, id, ok := termRecord(body[i+2:]); ok {
			return fence, id, true
		}
	}
	return 0, "", false
}

// termRecord parses "#<fence> <id>".
func termRecord(s string) (uint64, string, bool) {
	rest, marked := strings.CutPrefix(s, "#")
	digits, id, cut := strings.Cut(rest, " ")
	fence, err := strconv.ParseUint(digits, 10, 64)
	if !marked || !cut || id == "" || err != nil || fence == 0 || strconv.FormatUint(fence, 10) != digits {
		return 0, "", false
	}
	return fence, id, true
}
