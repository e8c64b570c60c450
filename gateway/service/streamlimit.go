package service

import (
	"context"
	"fmt"
	"sync"

	"connectrpc.com/connect"
)

// DefaultMaxStreamsPerUser bounds the Prompt and Watch streams a user has
// open at once.
const DefaultMaxStreamsPerUser = 100

// streamLimiter answers a user's server stream beyond max open at once
// with resource_exhausted. Interceptors installs it only behind
// authentication, so every stream it sees has a user. Each replica counts
// the streams it serves, a forwarded one included.
type streamLimiter struct {
	max  int
	user func(context.Context) string

	mu   sync.Mutex
	open map[string]int
}

func newStreamLimiter(max int, user func(context.Context) string) *streamLimiter {
	return &streamLimiter{max: max, user: user, open: map[string]int{}}
}

// take counts a stream of user's, or says why it may not open.
func (l *streamLimiter) take(user string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[user] >= l.max {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"%d Prompt and Watch streams of yours are open, the most this gateway takes per user; end one before opening another", l.max))
	}
	l.open[user]++
	return nil
}

func (l *streamLimiter) release(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[user]--; l.open[user] <= 0 {
		delete(l.open, user)
	}
}

func (l *streamLimiter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (l *streamLimiter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (l *streamLimiter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		user := l.user(ctx)
		if err := l.take(user); err != nil {
			return err
		}
		defer l.release(user)
		return next(ctx, conn)
	}
}
