package testproxy

import (
	"time"

	"go.uber.org/goleak"
)

// FindLeaks is goleak.Find with more patience, for a TestMain after tests
// that killed servers or cut connections: go-redis redials a server that
// went away from a goroutine that sleeps a second between tries and sees
// its client's Close only then, which can be later than goleak's own
// retries wait. A goroutine still there after 3s is reported. (It lives
// here because the bench module imports testsrv and should not need
// goleak.)
func FindLeaks(opts ...goleak.Option) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
