// Package compat holds the tests that run dlock beside other clients on the
// same keys (redsync, node-redlock) and on miniredis, the in-process
// imitation of Redis where the Redis 8.4 commands DELEX and SET IFEQ are
// available. It is a module of its own so that the library module does not
// require those clients; it has no code besides its tests.
package compat
