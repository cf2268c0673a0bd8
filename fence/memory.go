package fence

import (
	"sync"

	"github.com/dlock-go/dlock/internal/bridge"
)

// Memory is an in-memory guard for resources that live in one process: a
// map, a file the process owns, a connection to a device. It keeps, for
// each resource name, the highest fence seen and the token that set it, and
// runs each accepted operation while holding that resource's mutex, so the
// check and the operation are atomic with respect to every other guarded
// operation on the same resource. Operations on different resources do not
// wait for each other.
//
// Memory is safe for concurrent use. The zero value is not ready; use
// NewMemory. It remembers every resource name it has seen (a few dozen bytes
// each) for as long as it lives: forgetting one would reset its highest
// fence to 0 and let a stale holder in.
type Memory struct {
	mu  sync.Mutex
	res map[string]*entry
}

type entry struct {
	mu      sync.Mutex
	highest uint64
	token   string
}

// NewMemory returns an empty in-memory guard.
func NewMemory() *Memory { return &Memory{res: make(map[string]*entry)} }

func (m *Memory) entry(resource string) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.res[resource]
	if e == nil {
		e = &entry{}
		m.res[resource] = e
	}
	return e
}

// do validates the request, takes the resource's mutex, applies the rule,
// raises the highest fence and runs fn (if any) before letting go.
func (m *Memory) do(op, resource string, fence uint64, token string, fn func() error) error {
	if err := Validate(resource, fence, token); err != nil {
		return err
	}
	if m == nil || m.res == nil {
		return bridge.Invalidf("fence: %s %q: nil or zero Memory guard (use NewMemory)", op, resource)
	}
	e := m.entry(resource)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := Check(op, resource, fence, token, e.highest, e.token); err != nil {
		return err
	}
	e.highest, e.token = fence, token
	if fn == nil {
		return nil
	}
	return fn()
}

// Register raises the resource's highest fence to fence, claiming it for
// token, without reading or writing. A holder calls it (or Read) before it
// reads what it will later write, so that from then on a stale holder's
// late write is refused. It returns an error matching ErrStale when fence
// is stale and dlock.ErrInvalid for fence 0, an empty token or an empty
// resource name.
func (m *Memory) Register(resource string, fence uint64, token string) error {
	return m.do("register", resource, fence, token, nil)
}

// Read registers fence for token exactly as Register does and then, still
// holding the resource's mutex, calls read. Registering first is what makes
// read-modify-write safe: a stale holder whose write arrives between this
// read and the caller's write is refused instead of being silently
// overwritten. read must not call back into the guard for the same
// resource (it would deadlock). Read returns read's error, or an error
// matching ErrStale (read is not called) or dlock.ErrInvalid (also for a
// nil read).
func (m *Memory) Read(resource string, fence uint64, token string, read func() error) error {
	if read == nil {
		return bridge.Invalidf("fence: read %q: nil read function", resource)
	}
	return m.do("read", resource, fence, token, read)
}

// Write accepts a write under fence from token if fence is greater than the
// highest fence the resource has seen, or equal to it and token is the one
// that set it; it then raises the highest fence and calls apply while
// holding the resource's mutex, so no other guarded operation on the
// resource runs in between. The fence stays recorded even if apply fails:
// the caller is the newest holder either way. apply must not call back into
// the guard for the same resource (it would deadlock).
//
// Write returns apply's error, an error matching ErrStale when the fence is
// stale (apply is not called), or dlock.ErrInvalid for fence 0, an empty
// token, an empty resource name or a nil apply.
func (m *Memory) Write(resource string, fence uint64, token string, apply func() error) error {
	if apply == nil {
		return bridge.Invalidf("fence: write %q: nil apply function", resource)
	}
	return m.do("write", resource, fence, token, apply)
}

// Highest returns the highest fence the resource has seen and the token of
// the holder that set it; 0 and "" for a resource never touched.
func (m *Memory) Highest(resource string) (fence uint64, token string) {
	if m == nil || m.res == nil {
		return 0, ""
	}
	m.mu.Lock()
	e := m.res[resource]
	m.mu.Unlock()
	if e == nil {
		return 0, ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.highest, e.token
}
