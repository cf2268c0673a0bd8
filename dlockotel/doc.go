// Package dlockotel turns the events of dlock's locks into OpenTelemetry
// metrics and spans. It is a module of its own, so that a program that does
// not use OpenTelemetry does not download it. An Observer records the
// events of every Locker it is given to, through the Locker's WithObserver
// option:
//
//	obs, err := dlockotel.New() // the global MeterProvider and TracerProvider
//	...
//	locker, err := redislock.New(client, redislock.WithObserver(obs.Observe))
//	...
//	err = dlock.Do(ctx, locker, "report:daily", 30*time.Second, fn)
//
// # Metrics
//
// Names and units follow OpenTelemetry's conventions (the Prometheus
// exporter shows dlock.acquire.duration as dlock_acquire_duration_seconds
// and dlock.grants as dlock_grants_total):
//
//	name                      instrument     unit         attributes
//	dlock.acquire.duration    histogram      s            dlock.outcome, dlock.backend
//	dlock.hold.duration       histogram      s            dlock.outcome, dlock.backend
//	dlock.attempts            counter        {attempt}    dlock.outcome, dlock.backend
//	dlock.grants              counter        {grant}      dlock.backend
//	dlock.refusals            counter        {refusal}    dlock.outcome, dlock.backend
//	dlock.losses              counter        {loss}       dlock.detected, dlock.backend
//	dlock.extension.failures  counter        {extension}  dlock.outcome, dlock.backend
//	dlock.held                updowncounter  {lock}       dlock.backend
//	dlock.waiting             updowncounter  {waiter}     (none)
//
// dlock.acquire.duration is the time Acquire (or Do, before calling its
// function) waited, from its start to the grant or the refusal; its
// dlock.outcome is "granted" or the refusal's reason. dlock.hold.duration
// is the time from the grant to the first of the loss and the release:
// dlock.outcome "released" (the release deleted the lock), "lost" (the
// lock was lost first; its later release is not counted again),
// "not_held" (the release found the lock gone: it had expired or was
// taken over unnoticed), "unavailable" (the release's outcome is unknown),
// "misconfigured" (the backend refused it) or "error". dlock.attempts counts the attempts of each Acquire when it
// ends. dlock.refusals' dlock.outcome is the reason: "busy" (another owner
// held the lock), "unavailable" (the backend could not be reached),
// "misconfigured" (the backend refused: fix the setup), "invalid" (bad
// arguments), "cancelled" or "timeout" (the context ended:
// canceled, or its deadline passed), or "error". dlock.losses'
// dlock.detected says how the loss was found: "extension_refused",
// "session_gone" or "validity_ran_out". dlock.extension.failures'
// dlock.outcome is "not_held", "lost", "unavailable", "misconfigured",
// "invalid" or "error".
// dlock.held counts the locks held now (granted, neither lost nor
// released), dlock.waiting the calls of Acquire or Do waiting for a lock.
//
// dlock.backend is the backend's name ("redis", "redlock", "postgres",
// "etcd"), as the Locker reports it. It is absent when the backend does
// not name itself, and always on dlock.waiting.
//
// dashboard.json, in this module's directory, is a Grafana dashboard of
// these metrics as the Prometheus exporter names them: wait and hold
// percentiles, grants, refusals, attempts, losses and failed extensions by
// backend, locks held and waiters. The repository's docs/dashboard.png
// shows it over four minutes of real lock traffic: a faithful render of
// its panels (each query evaluated by a real Prometheus, drawn where the
// dashboard places it, screenshotted with headless Chromium; the program
// is internal/dashshot), not a screenshot of Grafana.
//
// The histograms' buckets (in seconds) are 0.001 to 60 for waits and 0.01
// to 3600 for holds; a View on the MeterProvider changes them.
//
// The meter and the tracer are named after this module's path, with its
// version as the program's build records it ("(devel)" when built from a
// work tree).
//
// # Spans
//
// Events arrive after the fact, so each span is made with the timestamps
// the event gives:
//
//	dlock.acquire  from Acquire's start (the event's time minus its Wait) to the
//	               grant or refusal; child of the span in Acquire's context
//	dlock.hold     from the grant to the first of the loss and the release
//	               (for Do: while its function ran); child of the same span
//	dlock.extend   one per extension (the event's time minus Took, to the
//	               event); child of dlock.hold while it lasts, else of the span
//	               in Extend's context
//	dlock.release  the same, for Release
//
// Their attributes: dlock.key (see below), dlock.fence (once granted),
// dlock.backend (when known), dlock.outcome (the values above; "granted",
// "extended" for the other cases), dlock.attempts and dlock.nodes (on
// dlock.acquire), dlock.detected (on a lost dlock.hold). A refusal, a
// loss, a failed extension and a failed release set the span's status to
// Error with the error's text.
//
// # Keys
//
// By default spans carry the lock's key as dlock.key, as database
// instrumentation records the statement: it is what one searches a trace
// for. Keys can carry customer ids: WithKeyHash puts dlock.key_hash (the
// first 8 bytes of the key's SHA-256, in hex) in its place, which still
// ties together the spans of one key but does not show it (it hides
// nothing from someone who can guess keys: hash a guess and compare),
// and WithoutKey leaves the key out. Metrics carry no key by default,
// since a label per key is a time series per key: WithKeyOnMetrics adds
// it (in the form chosen for spans), for programs with a few fixed keys.
//
// # State
//
// A hold spans several events, so the Observer keeps, per lock held (by
// backend, key and fence), its dlock.hold span and whether it was counted
// in dlock.held. It keeps at most 10000: when a grant finds it full, the
// oldest is dropped (its span ends with dlock.outcome "untracked", and
// dlock.held no longer counts it), so that handles that are never released
// cannot make it grow without bound.
package dlockotel
