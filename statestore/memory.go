package statestore

import (
	"context"
	"fmt"
	"sync"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Memory is a Store that keeps everything in the process: nothing survives
// a restart. Events and tool calls are stored as given and must not be
// modified afterwards.
type Memory struct {
	mu       sync.RWMutex
	sessions map[string]*memSession
	order    []string
}

type memSession struct {
	rec    Session
	events []*acpv2.SessionEvent
	calls  map[string]int // tool call id -> index in callList
	list   []*acpv2.ToolCall
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{sessions: map[string]*memSession{}}
}

func (m *Memory) get(id string) (*memSession, error) {
	s, ok := m.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return s, nil
}

// CreateSession implements Store.
func (m *Memory) CreateSession(_ context.Context, s *Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[s.ID]; ok {
		return fmt.Errorf("%w: %s", ErrExists, s.ID)
	}
	m.sessions[s.ID] = &memSession{rec: *s, calls: map[string]int{}}
	m.order = append(m.order, s.ID)
	return nil
}

// GetSession implements Store.
func (m *Memory) GetSession(_ context.Context, id string) (*Session, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	rec := s.rec
	return &rec, nil
}

// ListSessions implements Store.
func (m *Memory) ListSessions(_ context.Context, owner string) ([]*Session, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*Session
	for _, id := range m.order {
		s := m.sessions[id]
		if owner == "" || s.rec.Owner == owner {
			rec := s.rec
			out = append(out, &rec)
		}
	}
	return out, nil
}

// SetState implements Store.
func (m *Memory) SetState(_ context.Context, id string, state State, detail string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	s.rec.State, s.rec.Detail = state, detail
	return nil
}

// SetAgentSession implements Store.
func (m *Memory) SetAgentSession(_ context.Context, id, agentSessionID string, protocolVersion int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	s.rec.AgentSessionID, s.rec.ProtocolVersion = agentSessionID, protocolVersion
	return nil
}

// Append implements Store.
func (m *Memory) Append(_ context.Context, id string, events []*acpv2.SessionEvent, changed []*acpv2.ToolCall) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	if err := checkSeqs(s.rec.LastSeq, events); err != nil {
		return err
	}
	s.events = append(s.events, events...)
	if n := len(events); n > 0 {
		s.rec.LastSeq = events[n-1].GetSeq()
	}
	for _, tc := range changed {
		if i, ok := s.calls[tc.GetToolCallId()]; ok {
			s.list[i] = tc
			continue
		}
		s.calls[tc.GetToolCallId()] = len(s.list)
		s.list = append(s.list, tc)
	}
	return nil
}

// checkSeqs verifies that events continue a log whose last seq is last.
func checkSeqs(last uint64, events []*acpv2.SessionEvent) error {
	for i, e := range events {
		if want := last + uint64(i) + 1; e.GetSeq() != want {
			return fmt.Errorf("%w: got seq %d, want %d", ErrSeqConflict, e.GetSeq(), want)
		}
	}
	return nil
}

// Events implements Store.
func (m *Memory) Events(_ context.Context, id string, after uint64, limit int) ([]*acpv2.SessionEvent, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	// Seqs are dense from 1, so seq n sits at index n-1.
	if after >= uint64(len(s.events)) {
		return nil, nil
	}
	out := s.events[after:]
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return append([]*acpv2.SessionEvent(nil), out...), nil
}

// ToolCalls implements Store.
func (m *Memory) ToolCalls(_ context.Context, id string) ([]*acpv2.ToolCall, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	return append([]*acpv2.ToolCall(nil), s.list...), nil
}

// Close implements Store.
func (m *Memory) Close() error { return nil }
