//go:build !race

package redislock_test

const raceAllocs = 0
