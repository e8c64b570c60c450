package auth

import (
	"context"
	"time"
)

// SetOnWatching makes t's Watch call f once it has registered for SIGHUP, so
// that a test knows when sending SIGHUP is safe. Call it before Watch.
func SetOnWatching(t *Tokens, f func()) { t.onWatching = f }

// SetClock makes t read the time from now.
func SetClock(t *Throttle, now func() time.Time) { t.now = now }

// SetMaxAddresses bounds how many addresses t remembers.
func SetMaxAddresses(t *Throttle, n int) { t.max = n }

// Addresses returns how many buckets t tracks.
func Addresses(t *Throttle) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.addrs)
}

// Attempt makes one call from addr that failed or not, as the interceptor
// would, and returns the wait begin asked for (0: the call went on).
func Attempt(t *Throttle, addr string, failed bool) time.Duration {
	tk, wait := t.begin(addr)
	if wait > 0 {
		return wait
	}
	t.end(tk, failed)
	return 0
}

// Begin starts a call from addr and reports whether it may go on; the call
// never ends.
func Begin(t *Throttle, addr string) bool {
	_, wait := t.begin(addr)
	return wait == 0
}

// Start starts a call from addr and returns what ends it, or nil when it
// is refused.
func Start(t *Throttle, addr string) (end func(failed bool)) {
	tk, wait := t.begin(addr)
	if wait > 0 {
		return nil
	}
	return func(failed bool) { t.end(tk, failed) }
}

// CountsAsGuess reports whether the throttle counts a failure with err.
func CountsAsGuess(err error) bool { return countsAsGuess(err) }

// SetHold makes t hold refusals back with hold rather than by sleeping.
func SetHold(t *Throttle, hold func(ctx context.Context, d time.Duration)) { t.hold = hold }

// MaxHeld is how many refusals are held back at once.
const MaxHeld = maxHeld
