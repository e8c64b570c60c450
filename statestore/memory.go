package statestore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
)

// Memory is a Store that keeps everything in the process: nothing survives
// a restart. Events are kept in their protobuf wire form, which takes about
// a seventh of the memory of the decoded messages (381 bytes of heap
// instead of 2,618 for BenchmarkMemoryRetained's tool-call update:
// google.protobuf.Struct values in _meta and rawInput are large as
// objects): it keeps each event's bytes, not the event, and Events makes
// events of them again, decoded only when asked. Tool calls are kept in
// wire form too.
type Memory struct {
	opts     Options
	mu       sync.RWMutex
	sessions map[string]*memSession
	order    []string
	// ended holds the ids of the closed sessions, in the order they
	// closed.
	ended []string
}

type memSession struct {
	rec    Session
	events [][]byte       // encoded events, seqs TrimmedSeq+1 .. LastSeq
	bytes  int64          // the lengths of events
	calls  map[string]int // tool call id -> index in list
	list   [][]byte       // encoded tool calls
	// callBytes is the lengths of list.
	callBytes int64
	// changed is closed and replaced on every append and on deletion.
	changed chan struct{}
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory(opts Options) *Memory {
	return &Memory{opts: opts, sessions: map[string]*memSession{}}
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
	rec := *s
	rec.MCPServers = bytes.Clone(s.MCPServers)
	m.sessions[s.ID] = &memSession{rec: rec, calls: map[string]int{}, changed: make(chan struct{})}
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
	return s.record(), nil
}

// record returns a copy of s's record, with its Bytes.
func (s *memSession) record() *Session {
	rec := s.rec
	rec.Bytes = s.bytes + s.callBytes
	rec.MCPServers = bytes.Clone(rec.MCPServers)
	return &rec
}

// ListSessions implements Store.
func (m *Memory) ListSessions(_ context.Context, owner string) ([]*Session, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*Session
	for _, id := range m.order {
		s := m.sessions[id]
		if owner == "" || s.rec.Owner == owner {
			out = append(out, s.record())
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
	s.rec.State, s.rec.Detail, s.rec.StateChangedAt = state, detail, time.Now().UTC()
	m.ended = slices.DeleteFunc(m.ended, func(e string) bool { return e == id })
	if state != StateClosed {
		return nil
	}
	m.ended = append(m.ended, id)
	// Options.MaxEndedSessions: the first closed go, under the same lock.
	for limit := m.opts.MaxEndedSessions; limit > 0 && len(m.ended) > limit; {
		m.deleteLocked(m.ended[0], m.sessions[m.ended[0]])
	}
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
func (m *Memory) Append(_ context.Context, id string, events []*encoded.Event, changed []Call) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	if err := CheckSeqs(s.rec.LastSeq, events); err != nil {
		return err
	}
	for _, c := range changed {
		s.callBytes += int64(len(c.Proto))
		if j, ok := s.calls[c.ID]; ok {
			s.callBytes -= int64(len(s.list[j]))
			s.list[j] = c.Proto
			continue
		}
		s.calls[c.ID] = len(s.list)
		s.list = append(s.list, c.Proto)
	}
	if len(events) == 0 {
		return nil
	}
	for _, e := range events {
		s.events = append(s.events, e.Proto())
		s.bytes += int64(e.Size())
	}
	s.rec.LastSeq = events[len(events)-1].Seq()
	drop := 0
	for ; m.opts.Over(uint64(len(s.events)-drop), s.bytes); drop++ {
		s.bytes -= int64(len(s.events[drop]))
	}
	if drop > 0 {
		s.rec.TrimmedSeq += uint64(drop)
		// Reslice: append reallocates (copying only the kept events) once
		// the array is full, so a full session is not copied per append.
		// The dropped encodings are let go now, not then.
		clear(s.events[:drop])
		s.events = s.events[drop:]
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// Events implements Store. The events are made after the store is
// unlocked: a stored encoding is never changed (Append only writes past
// the end of s.events, and trimming reslices it), so the slice taken under
// the lock stays valid.
func (m *Memory) Events(_ context.Context, id string, after uint64, limit int) ([]*encoded.Event, error) {
	kept, err := m.encodedEvents(id, after, limit)
	if err != nil || len(kept) == 0 {
		return nil, err
	}
	out := make([]*encoded.Event, len(kept))
	for i, b := range kept {
		if out[i], err = encoded.Decode(b); err != nil {
			return nil, fmt.Errorf("statestore: decoding event %d of %s: %w", after+uint64(i)+1, id, err)
		}
	}
	return out, nil
}

// encodedEvents returns up to limit (0: no limit) stored encodings of the
// events of session id with seq > after.
func (m *Memory) encodedEvents(id string, after uint64, limit int) ([][]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	if after < s.rec.TrimmedSeq {
		return nil, TrimmedError(id, s.rec.TrimmedSeq, after)
	}
	// Kept seqs are dense, so seq n sits at index n-TrimmedSeq-1.
	skip := after - s.rec.TrimmedSeq
	if skip >= uint64(len(s.events)) {
		return nil, nil
	}
	kept := s.events[skip:]
	if limit > 0 && len(kept) > limit {
		kept = kept[:limit]
	}
	return kept, nil
}

// WaitEvents implements Store.
func (m *Memory) WaitEvents(ctx context.Context, id string, after uint64) error {
	for {
		m.mu.RLock()
		s, err := m.get(id)
		if err != nil {
			m.mu.RUnlock()
			return err
		}
		last, changed := s.rec.LastSeq, s.changed
		m.mu.RUnlock()
		if last > after {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ToolCalls implements Store.
func (m *Memory) ToolCalls(_ context.Context, id string) ([]*acpv2.ToolCall, uint64, error) {
	m.mu.RLock()
	s, err := m.get(id)
	if err != nil {
		m.mu.RUnlock()
		return nil, 0, err
	}
	list, asOf := slices.Clip(s.list), s.rec.LastSeq
	m.mu.RUnlock()
	// Decoded unlocked, as Events does: a kept encoding is never changed.
	out := make([]*acpv2.ToolCall, len(list))
	for i, b := range list {
		out[i] = &acpv2.ToolCall{}
		if err := proto.Unmarshal(b, out[i]); err != nil {
			return nil, 0, fmt.Errorf("statestore: decoding a tool call of %s: %w", id, err)
		}
	}
	return out, asOf, nil
}

// ToolCall implements Store.
func (m *Memory) ToolCall(_ context.Context, id, callID string) (*acpv2.ToolCall, uint64, error) {
	m.mu.RLock()
	s, err := m.get(id)
	if err != nil {
		m.mu.RUnlock()
		return nil, 0, err
	}
	var b []byte
	if i, ok := s.calls[callID]; ok {
		b = s.list[i]
	}
	asOf := s.rec.LastSeq
	m.mu.RUnlock()
	if b == nil {
		return nil, asOf, nil
	}
	tc := &acpv2.ToolCall{}
	if err := proto.Unmarshal(b, tc); err != nil {
		return nil, 0, fmt.Errorf("statestore: decoding tool call %q of %s: %w", callID, id, err)
	}
	return tc, asOf, nil
}

// DeleteSession implements Store.
func (m *Memory) DeleteSession(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	m.deleteLocked(id, s)
	return nil
}

// deleteLocked removes session id, s. m.mu must be held.
func (m *Memory) deleteLocked(id string, s *memSession) {
	delete(m.sessions, id)
	m.order = slices.DeleteFunc(m.order, func(o string) bool { return o == id })
	m.ended = slices.DeleteFunc(m.ended, func(e string) bool { return e == id })
	close(s.changed)
}

// Close implements Store.
func (m *Memory) Close() error { return nil }
