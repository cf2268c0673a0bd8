package scripts

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

//go:embed run_id.lua
var runIDSrc string

// Function is a script that also runs as a Redis Function (Redis 7.0 and
// later). A function's library is loaded once per server process and keeps
// its local variables between calls, which a script cannot: the library
// caches the server's run_id, which a script must read with INFO server on
// every run (about half of RedlockAcquire's time on the server). The cache
// is as fresh as INFO: a restart, FUNCTION LOAD or FUNCTION FLUSH starts a
// new Lua state with an empty cache, and the run_id of a server process
// never changes.
//
// The library is loaded on first use (FUNCTION LOAD, which Redis then keeps
// in its RDB and AOF files), named after a hash of its code, so that
// versions of dlock with different code do not replace each other's. Where
// functions are not available (Redis before 7.0, a user not allowed to load
// them), Run and Pipe fall back to the script, for good on that server.
type Function struct {
	Script *redis.Script // the same code as an EVAL script
	name   string        // the function (and its library) name
	lib    string        // the library's source
}

// newFunction builds a Function from body, a script that may call run_id()
// (run_id.lua).
func newFunction(base, body string) *Function {
	script := runIDSrc + "local run_id = server_run_id\n" + body
	sum := sha1.Sum([]byte(script))
	name := "dlock_" + base + "_" + hex.EncodeToString(sum[:6])
	lib := "#!lua name=" + name + "\n" + runIDSrc + `
local cached_run_id
local function run_id()
  if not cached_run_id then
    local run = server_run_id()
    if run == '' then
      return run
    end
    cached_run_id = run
  end
  return cached_run_id
end
redis.register_function('` + name + `', function(KEYS, ARGV)
` + body + `
end)
`
	return &Function{Script: redis.NewScript(script), name: name, lib: lib}
}

// Name returns the function's name on the servers.
func (f *Function) Name() string { return f.name }

// Functions records, for one server, whether Function calls go there as
// functions (the zero value) or, once that failed for good, as scripts.
type Functions struct{ off atomic.Bool }

// Argv returns the arguments of an FCALL of f, built once for several
// servers (see the package's Argv).
func (f *Function) Argv(keys []string, args ...any) []any {
	return buildArgv("fcall", f.name, keys, args)
}

// Run sends argv (from f.Argv) to c as an FCALL, loading the library first
// when the server does not have it; where functions are not available, it
// runs the script instead.
func (f *Function) Run(ctx context.Context, c redis.UniversalClient, fs *Functions, argv []any) *redis.Cmd {
	if !fs.off.Load() {
		cmd := c.Do(ctx, argv...)
		if !Missing(cmd.Err()) {
			return cmd
		}
		switch loaded, err := f.load(ctx, c, fs); {
		case loaded:
			if cmd = c.Do(ctx, argv...); !Missing(cmd.Err()) {
				return cmd
			}
		case !isReply(err):
			return cmd // unreachable now: the script would not get through either
		}
	}
	keys, args := split(argv)
	return f.Script.Run(ctx, c, keys, args...)
}

// Pipe queues argv on pipe: an FCALL, or an EVALSHA of the script where
// functions are off. When the command fails with an error for which
// Missing is true, call Run.
func (f *Function) Pipe(ctx context.Context, pipe redis.Pipeliner, fs *Functions, argv []any) *redis.Cmd {
	if !fs.off.Load() {
		return pipe.Do(ctx, argv...)
	}
	keys, args := split(argv)
	return f.Script.EvalSha(ctx, pipe, keys, args...)
}

// load loads f's library on c's server and reports whether the function
// can be called now. When the server cannot have functions (no FUNCTION
// command, or no permission to load), it turns them off there; other
// refusals, such as a replica's READONLY, only make this call a script.
func (f *Function) load(ctx context.Context, c redis.UniversalClient, fs *Functions) (bool, error) {
	err := c.FunctionLoad(ctx, f.lib).Err()
	switch {
	case err == nil || strings.Contains(err.Error(), "already exists"): // loaded by another client meanwhile
		return true, nil
	case redis.HasErrorPrefix(err, "NOPERM") || strings.Contains(err.Error(), "unknown command"):
		fs.off.Store(true)
	}
	return false, err
}

// Missing reports whether err says that the server does not have the
// function or script called (so the call did not run): the function is
// not loaded, functions are unknown there or not allowed, or (for a
// script) the script cache does not hold it.
func Missing(err error) bool {
	if err == nil || !isReply(err) {
		return false
	}
	if redis.HasErrorPrefix(err, "NOSCRIPT") || redis.HasErrorPrefix(err, "NOPERM") {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "Function not found") || strings.Contains(msg, "unknown command")
}

// isReply reports whether err is an error reply of the server, not a
// network failure or an ended context.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && err != redis.Nil
}

// split returns the keys and arguments of an FCALL or EVALSHA argv.
func split(argv []any) (keys []string, args []any) {
	n := argv[2].(int)
	keys = make([]string, n)
	for i := range keys {
		keys[i] = argv[3+i].(string)
	}
	return keys, argv[3+n:]
}
