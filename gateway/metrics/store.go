package metrics

import (
	"context"
	"errors"
	"time"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// InstrumentStore wraps st so that each operation's latency and failures
// are recorded. A store that is a statestore.Leaser stays one. Not-found
// answers are not failures; WaitEvents, which blocks until events come, is
// counted for failures only.
func (m *Metrics) InstrumentStore(st statestore.Store) statestore.Store {
	s := &store{Store: st, m: m}
	if l, ok := st.(statestore.Leaser); ok {
		return &leaserStore{store: s, l: l}
	}
	return s
}

type store struct {
	statestore.Store
	m *Metrics
}

// observe records an operation that started at start and ended with err.
func (s *store) observe(op string, start time.Time, err error) {
	s.m.storeLatency.WithLabelValues(op).Observe(since(start))
	s.failed(op, err)
}

func (s *store) failed(op string, err error) {
	if err != nil && !errors.Is(err, statestore.ErrNotFound) && !errors.Is(err, context.Canceled) {
		s.m.storeErrors.WithLabelValues(op).Inc()
	}
}

func (s *store) CreateSession(ctx context.Context, rec *statestore.Session) (err error) {
	defer func(t time.Time) { s.observe("create_session", t, err) }(time.Now())
	return s.Store.CreateSession(ctx, rec)
}

func (s *store) GetSession(ctx context.Context, id string) (rec *statestore.Session, err error) {
	defer func(t time.Time) { s.observe("get_session", t, err) }(time.Now())
	return s.Store.GetSession(ctx, id)
}

func (s *store) ListSessions(ctx context.Context, owner string) (recs []*statestore.Session, err error) {
	defer func(t time.Time) { s.observe("list_sessions", t, err) }(time.Now())
	return s.Store.ListSessions(ctx, owner)
}

func (s *store) SetState(ctx context.Context, id string, state statestore.State, detail string) (err error) {
	defer func(t time.Time) { s.observe("set_state", t, err) }(time.Now())
	return s.Store.SetState(ctx, id, state, detail)
}

func (s *store) SetAgentSession(ctx context.Context, id, agentSessionID string, version int) (err error) {
	defer func(t time.Time) { s.observe("set_agent_session", t, err) }(time.Now())
	return s.Store.SetAgentSession(ctx, id, agentSessionID, version)
}

func (s *store) Append(ctx context.Context, id string, events []*encoded.Event, changed []statestore.Call) (err error) {
	defer func(t time.Time) { s.observe("append", t, err) }(time.Now())
	return s.Store.Append(ctx, id, events, changed)
}

func (s *store) Events(ctx context.Context, id string, after uint64, limit int) (evs []*encoded.Event, err error) {
	defer func(t time.Time) { s.observe("events", t, err) }(time.Now())
	return s.Store.Events(ctx, id, after, limit)
}

func (s *store) WaitEvents(ctx context.Context, id string, after uint64) (err error) {
	defer func() {
		if !errors.Is(err, context.DeadlineExceeded) {
			s.failed("wait_events", err)
		}
	}()
	return s.Store.WaitEvents(ctx, id, after)
}

func (s *store) ToolCalls(ctx context.Context, id string) (calls []*acpv2.ToolCall, asOf uint64, err error) {
	defer func(t time.Time) { s.observe("tool_calls", t, err) }(time.Now())
	return s.Store.ToolCalls(ctx, id)
}

func (s *store) ToolCall(ctx context.Context, id, callID string) (tc *acpv2.ToolCall, asOf uint64, err error) {
	defer func(t time.Time) { s.observe("tool_call", t, err) }(time.Now())
	return s.Store.ToolCall(ctx, id, callID)
}

func (s *store) DeleteSession(ctx context.Context, id string) (err error) {
	defer func(t time.Time) { s.observe("delete_session", t, err) }(time.Now())
	return s.Store.DeleteSession(ctx, id)
}

// leaserStore is an instrumented store that also holds leases.
type leaserStore struct {
	*store
	l statestore.Leaser
}

var _ statestore.Leaser = (*leaserStore)(nil)

func (s *leaserStore) AcquireLease(ctx context.Context, id, holder string, ttl time.Duration) (err error) {
	defer func(t time.Time) {
		failure := err
		if errors.Is(err, statestore.ErrLeaseHeld) {
			failure = nil // an answer, not a failure
		}
		s.observe("acquire_lease", t, failure)
	}(time.Now())
	return s.l.AcquireLease(ctx, id, holder, ttl)
}

func (s *leaserStore) ReleaseLease(ctx context.Context, id, holder string) (err error) {
	defer func(t time.Time) { s.observe("release_lease", t, err) }(time.Now())
	return s.l.ReleaseLease(ctx, id, holder)
}

func (s *leaserStore) LeaseHolder(ctx context.Context, id string) (holder string, err error) {
	defer func(t time.Time) { s.observe("lease_holder", t, err) }(time.Now())
	return s.l.LeaseHolder(ctx, id)
}
