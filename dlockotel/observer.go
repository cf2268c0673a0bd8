package dlockotel

import (
	"cmp"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
)

// scope is the instrumentation scope of the meter and the tracer, and this
// module's path.
const scope = "github.com/dlock-go/dlock/dlockotel"

// scopeVersion is the scope's version: this module's version in the
// running program's build ("v0.1.0"; "(devel)" when it is built from a
// work tree), "" when the build does not say.
func scopeVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return moduleVersion(bi, scope)
}

// moduleVersion returns the version of module path in bi.
func moduleVersion(bi *debug.BuildInfo, path string) string {
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	for _, m := range bi.Deps {
		if m.Path == path {
			if r := m.Replace; r != nil {
				return cmp.Or(r.Version, "(devel)") // a directory has no version
			}
			return m.Version
		}
	}
	return ""
}

// maxTracked bounds the per-lock state (see the package doc).
const maxTracked = 10000

// Attribute keys.
const (
	attrKey      = attribute.Key("dlock.key")
	attrKeyHash  = attribute.Key("dlock.key_hash")
	attrBackend  = attribute.Key("dlock.backend")
	attrOutcome  = attribute.Key("dlock.outcome")
	attrFence    = attribute.Key("dlock.fence")
	attrAttempts = attribute.Key("dlock.attempts")
	attrNodes    = attribute.Key("dlock.nodes")
	attrDetected = attribute.Key("dlock.detected")
)

// Option configures an Observer.
type Option func(*config) error

type keyMode uint8

const (
	keyPlain keyMode = iota
	keyHash
	keyNone
)

type config struct {
	mp         metric.MeterProvider
	tp         trace.TracerProvider
	keys       keyMode
	keyMetrics bool
}

// WithMeterProvider makes the Observer record its metrics with mp instead
// of otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return errors.New("dlockotel: nil MeterProvider")
		}
		c.mp = mp
		return nil
	}
}

// WithTracerProvider makes the Observer record its spans with tp instead
// of otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("dlockotel: nil TracerProvider")
		}
		c.tp = tp
		return nil
	}
}

// WithKeyHash records dlock.key_hash, a short hash of the key, instead of
// the key (see the package doc).
func WithKeyHash() Option { return func(c *config) error { c.keys = keyHash; return nil } }

// WithoutKey records neither the key nor its hash.
func WithoutKey() Option { return func(c *config) error { c.keys = keyNone; return nil } }

// WithKeyOnMetrics adds the key (or its hash, with WithKeyHash) to every
// metric but dlock.waiting: a time series per key, for programs that lock
// a few fixed keys.
func WithKeyOnMetrics() Option { return func(c *config) error { c.keyMetrics = true; return nil } }

// Observer records the events of locks as metrics and spans. Its methods
// are safe for concurrent use; one Observer serves any number of locks and
// backends.
type Observer struct {
	tracer     trace.Tracer
	keys       keyMode
	keyMetrics bool

	wait, hold                                   metric.Float64Histogram
	attempts, grants, refusals, losses, extFails metric.Int64Counter
	held, waiting                                metric.Int64UpDownCounter

	// sets caches the measurement options without a key: building one
	// costs allocations and a sort each time (see bench/RESULTS.md,
	// "Figures once quoted in code comments").
	setsMu sync.RWMutex
	sets   map[setKey]metric.MeasurementOption

	mu     sync.Mutex
	locks  map[lockID]*list.Element // of *tracked
	order  list.List                // oldest grant first
	maxLen int
}

// lockID names one grant: fences increase per key and backend.
type lockID struct {
	backend, key string
	fence        uint64
}

// tracked is what the Observer keeps of a lock between its events.
type tracked struct {
	id    lockID
	span  trace.Span // dlock.hold
	ended bool       // lost: the hold is over, the release is still to come
}

// New returns an Observer. Give its Observe method to the WithObserver
// option of each Locker whose locks it should record.
func New(opts ...Option) (*Observer, error) {
	var c config
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("dlockotel: nil option")
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	version := scopeVersion()
	o := &Observer{tracer: c.tp.Tracer(scope, trace.WithInstrumentationVersion(version)), keys: c.keys, keyMetrics: c.keyMetrics,
		locks: map[lockID]*list.Element{}, maxLen: maxTracked, sets: map[setKey]metric.MeasurementOption{}}
	m := c.mp.Meter(scope, metric.WithInstrumentationVersion(version))
	var errs []error
	hist := func(name, desc string, bounds ...float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	gauge := func(name, unit, desc string) metric.Int64UpDownCounter {
		g, err := m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	o.wait = hist("dlock.acquire.duration", "Time from the start of Acquire to the grant or the refusal.",
		0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
	o.hold = hist("dlock.hold.duration", "Time from the grant to the release or the loss.",
		0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600)
	o.attempts = counter("dlock.attempts", "{attempt}", "Attempts to take a lock, counted when Acquire ends.")
	o.grants = counter("dlock.grants", "{grant}", "Locks granted.")
	o.refusals = counter("dlock.refusals", "{refusal}", "Acquire calls that ended without the lock, by reason.")
	o.losses = counter("dlock.losses", "{loss}", "Locks lost while held, by how the loss was detected.")
	o.extFails = counter("dlock.extension.failures", "{extension}", "Extensions that failed.")
	o.held = gauge("dlock.held", "{lock}", "Locks held now.")
	o.waiting = gauge("dlock.waiting", "{waiter}", "Acquire calls waiting for a lock now.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

// Observe records e. Give it to a Locker's WithObserver option (for
// example redislock.WithObserver(o.Observe)), which calls it with every
// event of the Locker's attempts and locks.
func (o *Observer) Observe(ctx context.Context, e dlock.Event) {
	now := time.Now()
	switch e.Kind {
	case dlock.EventAttempt:
		if e.Attempts == 1 {
			o.waiting.Add(ctx, 1)
		}
	case dlock.EventGranted:
		o.granted(ctx, now, e)
	case dlock.EventRefused:
		o.refused(ctx, now, e)
	case dlock.EventExtended, dlock.EventExtendFailed:
		o.extended(ctx, now, e)
	case dlock.EventLost:
		o.lost(ctx, now, e)
	case dlock.EventReleased:
		o.released(ctx, now, e)
	}
}

func (o *Observer) granted(ctx context.Context, now time.Time, e dlock.Event) {
	o.waiting.Add(ctx, -1)
	set := o.metricAttrs(e, attrOutcome.String("granted"))
	o.wait.Record(ctx, e.Wait.Seconds(), set)
	o.attempts.Add(ctx, int64(e.Attempts), set)
	bset := o.metricAttrs(e)
	o.grants.Add(ctx, 1, bset)
	o.held.Add(ctx, 1, bset)

	_, span := o.tracer.Start(ctx, "dlock.acquire", trace.WithTimestamp(now.Add(-e.Wait)))
	if span.IsRecording() {
		attrs := o.spanAttrs(e, attrOutcome.String("granted"), attrAttempts.Int(e.Attempts))
		if e.Nodes > 0 {
			attrs = append(attrs, attrNodes.Int(e.Nodes))
		}
		span.SetAttributes(attrs...)
	}
	span.End(trace.WithTimestamp(now))
	_, hold := o.tracer.Start(ctx, "dlock.hold", trace.WithTimestamp(now))
	if hold.IsRecording() {
		hold.SetAttributes(o.spanAttrs(e)...)
	}

	t := &tracked{id: lockID{e.Backend, e.Key, e.Fence}, span: hold}
	var evicted *tracked
	o.mu.Lock()
	if old, ok := o.locks[t.id]; ok { // a fence seen twice: keep the newer
		evicted = o.order.Remove(old).(*tracked)
	} else if len(o.locks) >= o.maxLen {
		evicted = o.order.Remove(o.order.Front()).(*tracked)
		delete(o.locks, evicted.id)
	}
	o.locks[t.id] = o.order.PushBack(t)
	o.mu.Unlock()
	if evicted != nil && !evicted.ended {
		o.held.Add(ctx, -1, o.metricAttrsOf(evicted.id.backend, evicted.id.key))
		evicted.span.SetAttributes(attrOutcome.String("untracked"))
		evicted.span.End(trace.WithTimestamp(now))
	}
}

func (o *Observer) refused(ctx context.Context, now time.Time, e dlock.Event) {
	o.waiting.Add(ctx, -1)
	reason := refusal(e.Err)
	set := o.metricAttrs(e, attrOutcome.String(reason))
	o.wait.Record(ctx, e.Wait.Seconds(), set)
	o.attempts.Add(ctx, int64(e.Attempts), set)
	o.refusals.Add(ctx, 1, set)

	_, span := o.tracer.Start(ctx, "dlock.acquire", trace.WithTimestamp(now.Add(-e.Wait)))
	if span.IsRecording() {
		span.SetAttributes(o.spanAttrs(e, attrOutcome.String(reason), attrAttempts.Int(e.Attempts))...)
	}
	setError(span, e.Err)
	span.End(trace.WithTimestamp(now))
}

func (o *Observer) extended(ctx context.Context, now time.Time, e dlock.Event) {
	outcome := "extended"
	if e.Kind == dlock.EventExtendFailed {
		outcome = opOutcome(e.Err)
		o.extFails.Add(ctx, 1, o.metricAttrs(e, attrOutcome.String(outcome)))
	}
	span := o.start(ctx, "dlock.extend", now.Add(-e.Took), o.parent(e), e, attrOutcome.String(outcome))
	setError(span, e.Err)
	span.End(trace.WithTimestamp(now))
}

func (o *Observer) lost(ctx context.Context, now time.Time, e dlock.Event) {
	detected := strings.ReplaceAll(e.Detected, " ", "_")
	o.losses.Add(ctx, 1, o.metricAttrs(e, attrDetected.String(detected)))
	id := lockID{e.Backend, e.Key, e.Fence}
	o.mu.Lock()
	var t *tracked
	if el, ok := o.locks[id]; ok && !el.Value.(*tracked).ended {
		t = el.Value.(*tracked)
		t.ended = true // the release that follows must not end the hold again
	}
	o.mu.Unlock()
	if t == nil {
		return
	}
	o.endHold(ctx, now, e, t.span, "lost", attrDetected.String(detected))
}

func (o *Observer) released(ctx context.Context, now time.Time, e dlock.Event) {
	outcome := opOutcome(e.Err)
	id := lockID{e.Backend, e.Key, e.Fence}
	o.mu.Lock()
	var t *tracked
	if el, ok := o.locks[id]; ok {
		t = o.order.Remove(el).(*tracked)
		delete(o.locks, id)
	}
	o.mu.Unlock()

	var parent trace.Span
	if t != nil && !t.ended {
		parent = t.span
	}
	span := o.start(ctx, "dlock.release", now.Add(-e.Took), parent, e, attrOutcome.String(outcome))
	setError(span, e.Err)
	span.End(trace.WithTimestamp(now))
	if parent != nil {
		o.endHold(ctx, now, e, parent, outcome)
	}
}

// endHold records the end of a hold: its duration, dlock.held, its span.
func (o *Observer) endHold(ctx context.Context, now time.Time, e dlock.Event, span trace.Span, outcome string, extra ...attribute.KeyValue) {
	o.hold.Record(ctx, e.Hold.Seconds(), o.metricAttrs(e, attrOutcome.String(outcome)))
	o.held.Add(ctx, -1, o.metricAttrs(e))
	if span.IsRecording() {
		span.SetAttributes(append(extra, attrOutcome.String(outcome))...)
	}
	setError(span, e.Err)
	span.End(trace.WithTimestamp(now))
}

// parent returns the open dlock.hold span of e's lock, if any.
func (o *Observer) parent(e dlock.Event) trace.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	if el, ok := o.locks[lockID{e.Backend, e.Key, e.Fence}]; ok && !el.Value.(*tracked).ended {
		return el.Value.(*tracked).span
	}
	return nil
}

// start starts a span of e at start, a child of parent if it is not nil,
// else of ctx's span. Attributes are set only on a span that records (a
// sampler sees none): building them is most of the cost with no tracer.
func (o *Observer) start(ctx context.Context, name string, start time.Time, parent trace.Span, e dlock.Event, extra ...attribute.KeyValue) trace.Span {
	if parent != nil {
		ctx = trace.ContextWithSpan(ctx, parent)
	}
	_, span := o.tracer.Start(ctx, name, trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(o.spanAttrs(e, extra...)...)
	}
	return span
}

func setError(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
}

// spanAttrs returns the attributes every span of e carries, and extra.
func (o *Observer) spanAttrs(e dlock.Event, extra ...attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3+len(extra))
	if kv, ok := o.keyAttr(e.Key); ok {
		attrs = append(attrs, kv)
	}
	if e.Fence != 0 {
		attrs = append(attrs, attrFence.Int64(int64(e.Fence)))
	}
	if e.Backend != "" {
		attrs = append(attrs, attrBackend.String(e.Backend))
	}
	return append(attrs, extra...)
}

// metricAttrs returns the measurement option of e's backend (and key, with
// WithKeyOnMetrics) and extra.
func (o *Observer) metricAttrs(e dlock.Event, extra ...attribute.KeyValue) metric.MeasurementOption {
	return o.metricAttrsOf(e.Backend, e.Key, extra...)
}

// setKey names a cached measurement option: a backend and at most one
// more attribute, whose values come from small fixed sets.
type setKey struct {
	backend string
	k       attribute.Key
	v       string
}

func (o *Observer) metricAttrsOf(backend, key string, extra ...attribute.KeyValue) metric.MeasurementOption {
	if o.keyMetrics || len(extra) > 1 {
		return o.buildAttrs(backend, key, extra...)
	}
	sk := setKey{backend: backend}
	if len(extra) == 1 {
		sk.k, sk.v = extra[0].Key, extra[0].Value.AsString()
	}
	o.setsMu.RLock()
	opt, ok := o.sets[sk]
	o.setsMu.RUnlock()
	if ok {
		return opt
	}
	opt = o.buildAttrs(backend, key, extra...)
	o.setsMu.Lock()
	if len(o.sets) < maxSets { // backends and outcomes are few; a bound all the same
		o.sets[sk] = opt
	}
	o.setsMu.Unlock()
	return opt
}

// maxSets bounds the cache of measurement options.
const maxSets = 1000

func (o *Observer) buildAttrs(backend, key string, extra ...attribute.KeyValue) metric.MeasurementOption {
	attrs := make([]attribute.KeyValue, 0, 2+len(extra))
	if backend != "" {
		attrs = append(attrs, attrBackend.String(backend))
	}
	if o.keyMetrics {
		if kv, ok := o.keyAttr(key); ok {
			attrs = append(attrs, kv)
		}
	}
	return metric.WithAttributes(append(attrs, extra...)...)
}

func (o *Observer) keyAttr(key string) (attribute.KeyValue, bool) {
	switch o.keys {
	case keyPlain:
		return attrKey.String(key), true
	case keyHash:
		return attrKeyHash.String(HashKey(key)), true
	}
	return attribute.KeyValue{}, false
}

// HashKey returns what WithKeyHash records for key: the first 8 bytes of
// its SHA-256, in hex. An operator computes it to find a known key's spans.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// refusal names why Acquire ended without the lock.
func refusal(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, dlock.ErrInvalid):
		return "invalid"
	case errors.Is(err, dlock.ErrNotAcquired):
		return "busy"
	case errors.Is(err, dlock.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, dlock.ErrMisconfigured):
		return "misconfigured"
	}
	return "error"
}

// opOutcome names the outcome of an Extend or a Release.
func opOutcome(err error) string {
	switch {
	case err == nil:
		return "released"
	case errors.Is(err, dlock.ErrLockLost):
		return "lost"
	case errors.Is(err, dlock.ErrNotHeld):
		return "not_held"
	case errors.Is(err, dlock.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, dlock.ErrMisconfigured):
		return "misconfigured"
	case errors.Is(err, dlock.ErrInvalid):
		return "invalid"
	}
	return "error"
}
