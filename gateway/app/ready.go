package app

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acp-gateway/acp-gateway/statestore"
)

// A gateway is ready (/readyz) while its store answers: a replica whose
// Redis is out of reach can neither start sessions nor serve their logs,
// and a load balancer should send its clients to another. A store on the
// network (statestore.Pinger) is asked at most once every readyCheckEvery,
// however often the probes come, each time for at most readyTimeout; a
// local store (memory, bolt) is always ready.
const (
	readyCheckEvery = time.Second
	readyTimeout    = time.Second
)

// readiness answers /readyz from the store's last ping; a draining
// gateway is not ready, whatever its store.
type readiness struct {
	store    statestore.Pinger
	now      func() time.Time
	draining atomic.Bool

	mu sync.Mutex
	at time.Time // of the last ping; zero before the first
	ok bool
}

func newReadiness(st statestore.Store) *readiness {
	r := &readiness{now: time.Now}
	r.store, _ = st.(statestore.Pinger)
	return r
}

// ready reports whether the store answered its last ping, pinging it again
// when that is more than readyCheckEvery ago.
func (r *readiness) ready() bool {
	if r.draining.Load() {
		return false
	}
	if r.store == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); r.at.IsZero() || now.Sub(r.at) >= readyCheckEvery {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		r.ok = r.store.Ping(ctx) == nil
		cancel()
		r.at = r.now()
	}
	return r.ok
}
