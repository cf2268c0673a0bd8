package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
)

func TestLogEvents(t *testing.T) {
	var buf bytes.Buffer
	log := logEvents(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx := context.Background()
	log(ctx, dlock.Event{Kind: dlock.EventAttempt, Key: "k"})
	log(ctx, dlock.Event{Kind: dlock.EventGranted, Key: "k", Backend: "redis", Fence: 7})
	log(ctx, dlock.Event{Kind: dlock.EventLost, Key: "k", Backend: "redis", Fence: 7, Detected: "extension refused", Err: errors.New("gone")})
	out := buf.String()
	for _, want := range []string{`level=DEBUG msg="dlock: lock granted" key=k backend=redis fence=7`,
		`level=WARN msg="dlock: lock lost" key=k backend=redis fence=7 detected="extension refused"`, "cause=gone"} {
		if !strings.Contains(out, want) {
			t.Errorf("log has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "msg=\"dlock: attempt") || strings.Count(out, "\n") != 2 {
		t.Errorf("an attempt was logged:\n%s", out)
	}

	// At Info, only the warnings.
	buf.Reset()
	log = logEvents(slog.New(slog.NewTextHandler(&buf, nil)))
	log(ctx, dlock.Event{Kind: dlock.EventGranted, Key: "k"})
	log(ctx, dlock.Event{Kind: dlock.EventReleased, Key: "k"})
	log(ctx, dlock.Event{Kind: dlock.EventExtendFailed, Key: "k", Err: errors.New("timeout")})
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "level=WARN") {
		t.Errorf("at Info: %q, want one warning", out)
	}
}

// A refusal that retrying cannot change (dlock.ErrMisconfigured) is a Warn
// record, once per logger (the Locker's): the caller gets every error, the
// log says it once.
func TestLogEventsMisconfiguredOnce(t *testing.T) {
	var buf bytes.Buffer
	log := logEvents(slog.New(slog.NewTextHandler(&buf, nil)))
	refused := fmt.Errorf("dlock: acquire \"k\": %w: node n1: WRONGPASS invalid password", dlock.ErrMisconfigured)
	for range 3 {
		log(context.Background(), dlock.Event{Kind: dlock.EventRefused, Key: "k", Backend: "redis", Err: refused})
	}
	log(context.Background(), dlock.Event{Kind: dlock.EventRefused, Key: "k", Err: errors.New("busy")})
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "level=WARN") || !strings.Contains(out, "WRONGPASS") {
		t.Errorf("three refusals by a misconfigured backend: %q, want one warning with the server's reason", out)
	}
}
