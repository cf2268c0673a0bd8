package driver

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/dlock-go/dlock"
)

// logEvents returns an observer that logs a Locker's events to logger at
// the levels NewEvents gives. A record that the logger would drop costs
// one Enabled call; a logger whose handler is slog.DiscardHandler gives nil
// (no observer).
func logEvents(logger *slog.Logger) func(context.Context, dlock.Event) {
	if logger == nil || logger.Handler() == slog.DiscardHandler {
		return nil
	}
	var warned atomic.Bool // about a misconfigured backend
	return func(ctx context.Context, e dlock.Event) {
		level := slog.LevelDebug
		var msg string
		switch e.Kind {
		case dlock.EventLost:
			level, msg = slog.LevelWarn, "dlock: lock lost"
		case dlock.EventExtendFailed:
			level, msg = slog.LevelWarn, "dlock: extension failed"
		case dlock.EventGranted:
			msg = "dlock: lock granted"
		case dlock.EventRefused:
			msg = "dlock: lock not acquired"
		case dlock.EventReleased:
			msg = "dlock: lock released"
		default:
			return
		}
		if level == slog.LevelDebug && errors.Is(e.Err, dlock.ErrMisconfigured) && !warned.Swap(true) {
			level, msg = slog.LevelWarn, "dlock: the backend refused the request: fix its configuration"
		}
		if !logger.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{slog.String("key", e.Key), slog.String("backend", e.Backend)}
		switch e.Kind {
		case dlock.EventGranted:
			attrs = append(attrs, slog.Uint64("fence", e.Fence), slog.Duration("wait", e.Wait), slog.Int("attempts", e.Attempts))
		case dlock.EventRefused:
			attrs = append(attrs, slog.Duration("wait", e.Wait), slog.Int("attempts", e.Attempts), slog.Any("error", e.Err))
		case dlock.EventLost:
			attrs = append(attrs, slog.Uint64("fence", e.Fence), slog.String("detected", e.Detected), slog.Duration("held", e.Hold), slog.Any("cause", e.Err))
		case dlock.EventExtendFailed:
			attrs = append(attrs, slog.Uint64("fence", e.Fence), slog.Any("cause", e.Err))
		case dlock.EventReleased:
			attrs = append(attrs, slog.Uint64("fence", e.Fence), slog.Duration("held", e.Hold))
			if e.Err != nil {
				attrs = append(attrs, slog.Any("error", e.Err))
			}
		}
		logger.LogAttrs(ctx, level, msg, attrs...)
	}
}
