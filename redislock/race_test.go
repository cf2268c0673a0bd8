//go:build race

package redislock_test

// raceAllocs is what the race detector adds to a cycle's allocations.
const raceAllocs = 1
