package session

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Snapshot returns the merged state of user's session id, from this
// gateway's session or from the store.
func (m *Manager) Snapshot(ctx context.Context, user, id string) (*acpv2.SessionSnapshot, error) {
	if s := m.local(id); s != nil {
		if _, err := owned(s, user); err != nil {
			return nil, err
		}
		return s.Snapshot(), nil
	}
	rec, err := m.record(ctx, user, id)
	if err != nil {
		return nil, err
	}
	return storedSnapshot(ctx, m.opts.Store, rec)
}

func storedSnapshot(ctx context.Context, st statestore.Store, rec *statestore.Session) (*acpv2.SessionSnapshot, error) {
	calls, asOf, err := st.ToolCalls(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	return &acpv2.SessionSnapshot{
		SessionId: rec.ID, ToolCalls: calls, Agent: rec.Agent, Cwd: rec.Cwd, LastSeq: asOf,
		CreatedAt: timestamppb.New(rec.CreatedAt), State: string(rec.State), StateDetail: rec.Detail,
		AgentContextLost: agentContextLost(rec),
	}, nil
}

// readEvents reads stored events after seq after. Events dropped by
// retention are replaced by one snapshot event whose seq is the last event
// it reflects, so a reader never silently misses state. local is the
// session when this gateway runs it, whose pending elicitations the
// snapshot then holds; nil otherwise.
func readEvents(ctx context.Context, st statestore.Store, id string, after uint64, limit int, local *Session) ([]*encoded.Event, error) {
	events, err := st.Events(ctx, id, after, limit)
	if !errors.Is(err, statestore.ErrTrimmed) {
		return events, err
	}
	rec, err := st.GetSession(ctx, id)
	if err != nil {
		return nil, err
	}
	snap, err := storedSnapshot(ctx, st, rec)
	if err != nil {
		return nil, err
	}
	if local != nil {
		snap.PendingElicitations = local.pendingElicitations()
	}
	ev, err := encoded.New(&acpv2.SessionEvent{Seq: snap.GetLastSeq(), Time: timestamppb.Now(),
		Event: &acpv2.SessionEvent_Snapshot{Snapshot: snap}})
	if err != nil {
		return nil, err
	}
	return []*encoded.Event{ev}, nil
}

// closes says whether ev is the session's state changing to closed.
func closes(ev *encoded.Event) bool {
	if ev.Kind() != encoded.StateChanged {
		return false
	}
	msg, err := ev.Message()
	return err == nil && msg.GetStateChanged().GetState() == string(statestore.StateClosed)
}

// Stream is a source of a session's events in seq order.
type Stream interface {
	// NextBatch fills dst with the next events, at least one, waiting for
	// one if need be, and returns how many it wrote; or why the stream
	// ended, once every event before the end was returned.
	NextBatch(ctx context.Context, dst []*encoded.Event) (int, error)
	// LastSeq is the seq of the last event NextBatch returned.
	LastSeq() uint64
	// Close ends the stream.
	Close()
}

// Watch streams user's session id from afterSeq: live from this gateway's
// session, or followed in the store when another replica runs it (or none
// does), so a watcher keeps its stream when that replica dies.
func (m *Manager) Watch(ctx context.Context, user, id string, afterSeq uint64) (Stream, error) {
	if s := m.local(id); s != nil {
		if _, err := owned(s, user); err != nil {
			return nil, err
		}
		return s.Watch(afterSeq), nil
	}
	if _, err := m.record(ctx, user, id); err != nil {
		return nil, err
	}
	return &follower{st: m.opts.Store, id: id, next: afterSeq + 1}, nil
}

// follower reads a session's events from the store, waiting for new ones.
type follower struct {
	st   statestore.Store
	id   string
	next uint64
	page []*encoded.Event
	done bool
}

func (f *follower) NextBatch(ctx context.Context, dst []*encoded.Event) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	for len(f.page) == 0 {
		if f.done {
			return 0, ErrClosed
		}
		events, err := readEvents(ctx, f.st, f.id, f.next-1, replayPage, nil)
		if err != nil {
			return 0, err
		}
		if len(events) > 0 {
			f.page = events
			break
		}
		if err := f.st.WaitEvents(ctx, f.id, f.next-1); err != nil {
			if errors.Is(err, statestore.ErrNotFound) {
				return 0, ErrClosed
			}
			return 0, err
		}
	}
	n := 0
	for n < len(dst) && len(f.page) > 0 {
		ev := f.page[0]
		f.page = f.page[1:]
		dst[n] = ev
		n++
		f.next = ev.Seq() + 1
		if closes(ev) {
			f.done, f.page = true, nil
		}
	}
	return n, nil
}

func (f *follower) LastSeq() uint64 { return f.next - 1 }

func (f *follower) Close() {}
