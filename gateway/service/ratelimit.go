package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
)

// rateLimiter gives each authenticated user a token bucket: rps requests a
// second on average, bursts of up to burst. Interceptors installs it only
// behind authentication, so every call it sees has a user.
type rateLimiter struct {
	rps   rate.Limit
	burst int
	user  func(context.Context) string

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// maxIdleBuckets is how many buckets are kept before full (idle) ones are
// dropped: a dropped bucket comes back full, which is what it was.
const maxIdleBuckets = 10000

// newRateLimiter returns an interceptor that answers a user's requests
// beyond rps a second (bursts of burst) with resource_exhausted. A server
// stream counts once, when it opens. user names the caller.
func newRateLimiter(rps float64, burst int, user func(context.Context) string) connect.Interceptor {
	l := &rateLimiter{rps: rate.Limit(rps), burst: burst, user: user, buckets: map[string]*rate.Limiter{}}
	return beforeCall(l.allow)
}

func (l *rateLimiter) allow(ctx context.Context) error {
	key := l.user(ctx)
	l.mu.Lock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxIdleBuckets {
			for k, old := range l.buckets {
				if old.Tokens() >= float64(l.burst) {
					delete(l.buckets, k)
				}
			}
		}
		b = rate.NewLimiter(l.rps, l.burst)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	r := b.Reserve()
	if !r.OK() {
		return connect.NewError(connect.CodeResourceExhausted, errors.New("too many requests"))
	}
	d := r.Delay()
	if d == 0 {
		return nil
	}
	r.Cancel()
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"too many requests: this gateway takes %g a second per user (bursts of %d); retry in %v",
		float64(l.rps), l.burst, d.Round(time.Millisecond)))
}
