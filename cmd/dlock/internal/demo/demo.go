package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/dlock-go/dlock/cmd/dlock/internal/timeline"
	"github.com/dlock-go/dlock/internal/bridge"
)

// Options configures Run. The zero value starts temporary servers.
type Options struct {
	// RedisURLs are servers to run on, as redis:// or rediss:// URLs
	// (go-redis ParseURL syntax). The single-node scenarios run on the
	// first; Redlock runs on all of them, plus temporary local servers
	// when fewer than five are given. Empty (the default) starts five
	// temporary redis-server processes, or embedded in-process servers
	// where no redis-server is on PATH.
	RedisURLs []string
	// Timeline, when set, is where a timeline picture of the scenarios
	// with several clients is written (SVG, or HTML for a .html name).
	Timeline string
}

// scenario is one claim: what it runs and what it proves.
type scenario struct {
	title   string
	short   string   // the title in the summary
	summary string   // one line for the final summary
	proves  []string // the paragraph printed after the results
	run     func(ctx context.Context, e *env, s *section) error
}

// scenarios lists the scenarios in order (a variable so that tests can check
// how Run reports a claim that does not hold).
var scenarios = func() []scenario {
	list := []scenario{
		basicScenario,
		expiryScenario,
		luaScenario,
		fencingScenario,
		electionScenario,
		workersScenario,
		redlockScenario,
		etcdScenario, // its own servers: etcd, not Redis
	}
	if postgresInstalled() {
		list = append(list, postgresScenario)
	}
	return list
}

// Run runs the narrated scenarios and writes them to w. Every outcome is
// checked: when one is not what its scenario claims, the line says FAILED and
// Run returns an error after the remaining scenarios ran. When ctx ends, Run
// stops, removes the servers it started and returns an error matching
// ctx's error. Concurrent calls share nothing: each starts its own servers
// and uses its own key prefix.
func Run(ctx context.Context, w io.Writer, opts Options) error {
	if ctx == nil {
		return bridge.Invalidf("demo: nil context")
	}
	if w == nil {
		w = io.Discard
	}
	p := &printer{w: w}
	e, err := setup(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(ctx)
		}
		return err
	}
	defer e.close()
	if opts.Timeline != "" {
		e.tl = timeline.New("dlock demo: the scenarios with several clients")
	}

	if err := header(ctx, e, p); err != nil {
		if ctx.Err() != nil {
			return interrupted(ctx)
		}
		return err
	}

	type verdict struct {
		title, summary string
		failed         bool
	}
	var verdicts []verdict
	var failed []string
	for i, sc := range scenarios() {
		e.scene = fmt.Sprintf("%d. ", i+1)
		p.printf("\n%d. %s\n", i+1, sc.title)
		s := &section{p: p}
		runErr := sc.run(ctx, e, s)
		if ctx.Err() != nil {
			p.printf("   (interrupted)\n")
			return interrupted(ctx)
		}
		if runErr != nil {
			s.fail("%v", runErr)
		}
		if len(s.failures) == 0 {
			p.printf("   What it proves:\n")
			for _, l := range sc.proves {
				p.printf("     %s\n", l)
			}
		} else {
			p.printf("   FAILED: this scenario did not behave as it claims.\n")
			failed = append(failed, fmt.Sprintf("%d (%s): %s", i+1, sc.title, strings.Join(s.failures, "; ")))
		}
		verdicts = append(verdicts, verdict{sc.short, sc.summary, len(s.failures) > 0})
		if p.err != nil {
			// Nobody reads the narration any more (a closed pipe).
			return fmt.Errorf("demo: writing the output: %w", p.err)
		}
	}

	if e.tl != nil {
		if err := e.tl.WriteFile(opts.Timeline); err != nil {
			return fmt.Errorf("demo: timeline: %w", err)
		}
	}

	p.printf("\nSummary\n")
	for i, v := range verdicts {
		mark := "ok    "
		if v.failed {
			mark = "FAILED"
		}
		p.printf("  %d. %s %s  %s\n", i+1, pad(v.title, 24), mark, v.summary)
	}
	if len(failed) > 0 {
		p.printf("%d of %d scenarios FAILED.\n", len(failed), len(verdicts))
		return fmt.Errorf("demo: %d of %d scenarios failed: %s", len(failed), len(verdicts), strings.Join(failed, " | "))
	}
	p.printf("All %d scenarios behaved as described.\n", len(verdicts))
	if p.err != nil {
		return fmt.Errorf("demo: writing the output: %w", p.err)
	}
	return nil
}

// interrupted is Run's error when ctx ended: it matches ctx.Err() and, when
// the context was cancelled with a cause, the cause too.
func interrupted(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("demo interrupted: %w (%w)", err, cause)
	}
	return fmt.Errorf("demo interrupted: %w", err)
}

// header says what runs where: which servers, which Redis version, which
// release path.
func header(ctx context.Context, e *env, p *printer) error {
	infos := make([]serverInfo, len(e.nodes))
	for i, n := range e.nodes {
		si, err := probe(ctx, n.direct, e.prefix)
		if err != nil {
			return fmt.Errorf("demo: probe %s: %w", n.addr, err)
		}
		infos[i] = si
	}
	e.info = infos[0]
	for i, n := range e.nodes {
		n.version = infos[i].version
	}

	var yours, local []*node
	var localInfo serverInfo
	for i, n := range e.nodes {
		if n.origin == "yours" {
			yours = append(yours, n)
		} else {
			local = append(local, n)
			localInfo = infos[i]
		}
	}
	switch {
	case len(yours) == 0 && e.embedded:
		p.printf("dlock demo: no redis-server on PATH, so this runs on %d embedded in-process servers (miniredis, an\n", len(local))
		p.printf("imitation of Redis) whose TTLs expire in real time. Install redis-server to see the real thing.\n")
	case len(yours) == 0:
		p.printf("dlock demo: %d temporary redis-server process%s (Redis %s), started for this run on\n",
			len(local), pluralEs(len(local)), orUnknown(localInfo.version))
		p.printf("%s; stopped and removed at the end, even on Ctrl-C.\n", addrs(local))
	default:
		p.printf("dlock demo on your server%s %s.\n", plural(len(yours)), addrs(yours))
		p.printf("Its keys start with %q and are deleted at the end; your data is not touched.\n", e.prefix)
		switch {
		case len(local) > 0 && e.embedded:
			p.printf("Redlock needs 5 independent servers and no redis-server is on PATH, so the other %d are\n", len(local))
			p.printf("embedded in-process servers (miniredis, an imitation of Redis; TTLs in real time) on\n%s.\n", addrs(local))
		case len(local) > 0:
			p.printf("Redlock needs 5 independent servers, so the demo also started %d temporary redis-server\n", len(local))
			p.printf("process%s (Redis %s) on %s; stopped and removed at the end, even on Ctrl-C.\n",
				pluralEs(len(local)), orUnknown(localInfo.version), addrs(local))
		}
	}

	first := e.nodes[0]
	kind := "Redis " + orUnknown(infos[0].version)
	if first.origin == "embedded" {
		kind = "miniredis"
	}
	p.printf("\nScenarios 1-5 run on %s (%s). %s\n", first.addr, kind, nativeSentence(infos[0]))
	p.printf("A and B (and C) below are separate lock holders; in production they would be separate processes.\n")
	if !postgresInstalled() {
		p.printf("%s\n", postgresHint)
	}
	return nil
}

func nativeSentence(si serverInfo) string {
	switch n := si.native; {
	case n.Release != "" && n.SetIfEq:
		return fmt.Sprintf("It has %s and SET IFEQ,\nso dlock releases with %[1]s and extends with a Lua script or SET IFEQ.", strings.ToUpper(n.Release))
	case n.Release != "":
		return fmt.Sprintf("It has %s but not SET IFEQ,\nso dlock releases with %[1]s and extends with a Lua script.", strings.ToUpper(n.Release))
	default:
		return "It has neither DELEX nor SET IFEQ\n(Redis 8.4+), so dlock releases and extends with Lua scripts (the pre-8.4 path)."
	}
}

func addrs(ns []*node) string {
	if len(ns) == 0 {
		return ""
	}
	// Temporary servers share a host: list it once, then the ports.
	host, _, err := net.SplitHostPort(ns[0].addr)
	same := err == nil
	var ports []string
	for _, n := range ns {
		h, port, err := net.SplitHostPort(n.addr)
		if err != nil || h != host {
			same = false
		}
		ports = append(ports, port)
	}
	if same && len(ns) > 1 {
		return host + " ports " + strings.Join(ports, ", ")
	}
	var all []string
	for _, n := range ns {
		all = append(all, n.addr)
	}
	return strings.Join(all, ", ")
}

func orUnknown(v string) string {
	if v == "" {
		return "version unknown"
	}
	return v
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func pluralEs(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
