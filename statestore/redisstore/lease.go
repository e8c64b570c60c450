package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acp-gateway/acp-gateway/statestore"
)

// AcquireLease implements statestore.Leaser: SET NX PX takes a free lease,
// and its holder extends it with PEXPIRE, in one script.
func (s *Store) AcquireLease(ctx context.Context, id, holder string, ttl time.Duration) error {
	if holder == "" {
		return fmt.Errorf("redisstore: lease on session %s: empty holder", id)
	}
	if ttl <= 0 {
		return fmt.Errorf("redisstore: lease on session %s: ttl %v is not positive", id, ttl)
	}
	cur, err := acquireScript.Run(ctx, s.rdb, []string{s.keys(id).lease}, holder, max(ttl.Milliseconds(), 1)).Text()
	if err != nil {
		return failed("take the lease on", id, err)
	}
	if cur != "" {
		return fmt.Errorf("%w: session %s is held by %s", statestore.ErrLeaseHeld, id, cur)
	}
	return nil
}

// ReleaseLease implements statestore.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, id, holder string) error {
	if err := releaseScript.Run(ctx, s.rdb, []string{s.keys(id).lease}, holder).Err(); err != nil {
		return failed("release the lease on", id, err)
	}
	return nil
}

// LeaseHolder implements statestore.Leaser.
func (s *Store) LeaseHolder(ctx context.Context, id string) (string, error) {
	h, err := s.rdb.Get(ctx, s.keys(id).lease).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", failed("read the lease on", id, err)
	}
	return h, nil
}
