package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Argv returns the arguments of an EVALSHA of s, built once so that a
// caller sending the same call to several servers (Redlock's nodes) does
// not build them for each: the slice is only read, so concurrent sends may
// share it.
func Argv(s *redis.Script, keys []string, args ...any) []any {
	return buildArgv("evalsha", s.Hash(), keys, args)
}

// buildArgv returns cmd (EVALSHA or FCALL) of name on keys with args.
func buildArgv(cmd, name string, keys []string, args []any) []any {
	argv := make([]any, 0, 3+len(keys)+len(args))
	argv = append(argv, cmd, name, len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	return append(argv, args...)
}

// RunArgv sends argv (from Argv(s, ...)) to c and, when the server does not
// know the script (NOSCRIPT: restarted, failed over, or SCRIPT FLUSH),
// sends the script itself, as redis.Script.Run does.
func RunArgv(ctx context.Context, c redis.UniversalClient, s *redis.Script, argv []any) *redis.Cmd {
	cmd := c.Do(ctx, argv...)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		keys, args := split(argv)
		return s.Eval(ctx, c, keys, args...)
	}
	return cmd
}
