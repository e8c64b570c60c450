package session

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	"github.com/acp-gateway/acp-gateway/gateway/sessionstate"
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
	kept, err := readStored(ctx, st, rec)
	if err != nil {
		return nil, err
	}
	snap := &acpv2.SessionSnapshot{
		SessionId: rec.ID, ToolCalls: kept.calls, Agent: rec.Agent, Cwd: rec.Cwd, LastSeq: kept.asOf,
		CreatedAt: timestamppb.New(rec.CreatedAt), State: string(rec.State), StateDetail: rec.Detail,
		AgentContextLost: agentContextLost(rec), UpdatedAt: kept.updated,
	}
	kept.state.Fill(snap)
	if len(snap.GetPendingPermissions()) > 0 {
		byID := make(map[string]*acpv2.ToolCall, len(kept.calls))
		for _, tc := range kept.calls {
			byID[tc.GetToolCallId()] = tc
		}
		withPreviews(snap, func(id string) *acpv2.ToolCall { return byID[id] })
	}
	return snap, nil
}

// withPreviews gives snap's pending permission requests their preview,
// as the live permissionRequest event has it: the session's call of the
// request's toolCallId (call returns it, nil for none) with the
// request's patch applied, now. A preview over sessionstate.MaxPart is
// cut to what identifies its call (merge.ThinCall). The requests are
// copied: the state's are shared.
func withPreviews(snap *acpv2.SessionSnapshot, call func(id string) *acpv2.ToolCall) {
	pending := make([]*acpv2.PermissionRequest, len(snap.GetPendingPermissions()))
	for i, r := range snap.GetPendingPermissions() {
		pending[i] = r
		preview, err := merge.Apply(call(r.GetToolCall().GetToolCallId()), r.GetToolCall())
		if err != nil {
			continue // no call named: nothing to preview
		}
		if proto.Size(preview) > sessionstate.MaxPart {
			preview = merge.ThinCall(preview)
		}
		with := &acpv2.PermissionRequest{}
		r.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			with.ProtoReflect().Set(fd, v)
			return true
		})
		with.Preview = preview
		pending[i] = with
	}
	snap.PendingPermissions = pending
}

// storedState is what the store holds of a session besides its record and
// events: its tool calls and materialised state, the seq of the last
// event they reflect, and that event's time (nil before any).
type storedState struct {
	calls   []*acpv2.ToolCall
	state   *sessionstate.State
	asOf    uint64
	updated *timestamppb.Timestamp
	// ended says that the state stored had a turn running or a request
	// waiting, which the session's agent is no longer there for.
	ended bool
}

// readStored reads what the store holds of session rec. A session whose
// agent is gone runs no turn and has no request waiting, whatever the
// state stored last said (the end of a turn its gateway left running is
// recorded without it: settle).
func readStored(ctx context.Context, st statestore.Store, rec *statestore.Session) (*storedState, error) {
	all, asOf, err := st.ToolCalls(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	calls, state, err := sessionstate.FromCalls(all)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", rec.ID, err)
	}
	out := &storedState{calls: calls, state: state, asOf: asOf}
	if !live(rec.State) {
		out.ended = state.EndTurn()
	}
	if out.updated, err = lastTime(ctx, st, rec.ID, asOf); err != nil {
		return nil, err
	}
	return out, nil
}

// lastTime returns the time of session id's event asOf, its last (nil
// for 0): one event read, the newest being always kept.
func lastTime(ctx context.Context, st statestore.Store, id string, asOf uint64) (*timestamppb.Timestamp, error) {
	if asOf == 0 {
		return nil, nil
	}
	last, err := st.Events(ctx, id, asOf-1, 1)
	if err != nil || len(last) != 1 {
		return nil, err
	}
	if msg, err := last[0].Message(); err == nil {
		return msg.GetTime(), nil
	}
	return nil, nil // a time not known, not a failed read
}

// storedSummary is the summary of session rec, which this gateway does
// not run, from the store: its record, its state record alone
// (Store.ToolCall) and its last event, whatever the number and size of
// its tool calls.
func storedSummary(ctx context.Context, st statestore.Store, rec *statestore.Session) (*acpv2.SessionSummary, error) {
	sum := &acpv2.SessionSummary{
		SessionId: rec.ID, Agent: rec.Agent, Cwd: rec.Cwd, LastSeq: rec.LastSeq, CreatedAt: timestamppb.New(rec.CreatedAt),
		State: string(rec.State), StateDetail: rec.Detail,
	}
	record, asOf, err := st.ToolCall(ctx, rec.ID, sessionstate.RecordID)
	if err != nil {
		return nil, err
	}
	if sum.UpdatedAt, err = lastTime(ctx, st, rec.ID, asOf); err != nil {
		return nil, err
	}
	state, err := sessionstate.FromRecord(record)
	if err != nil {
		// What the session's record says still stands.
		return sum, fmt.Errorf("session %s: %w", rec.ID, err)
	}
	if !live(rec.State) {
		state.EndTurn()
	}
	state.Summarise(sum)
	return sum, nil
}

// Summaries returns the summaries of user's sessions, oldest first: from
// this gateway's sessions, or from the store.
func (m *Manager) Summaries(ctx context.Context, user string) ([]*acpv2.SessionSummary, error) {
	recs, err := m.List(ctx, user)
	if err != nil {
		return nil, err
	}
	out := make([]*acpv2.SessionSummary, 0, len(recs))
	for _, r := range recs {
		if s := m.local(r.ID); s != nil {
			out = append(out, s.Summary())
			continue
		}
		sum, err := storedSummary(ctx, m.opts.Store, r)
		switch {
		case errors.Is(err, statestore.ErrNotFound):
			continue // deleted meanwhile
		case errors.Is(err, sessionstate.ErrCorrupt):
			// One unreadable record does not hide the user's other
			// sessions: this one is listed without its state.
			m.opts.Log.Warn("listing a session without its state", "session", r.ID, "error", err.Error())
		case err != nil:
			return nil, err
		}
		out = append(out, sum)
	}
	return out, nil
}

// readEvents reads stored events after seq after. Events dropped by
// retention are replaced by one snapshot event whose seq is the last event
// it reflects, so a reader never silently misses state.
func readEvents(ctx context.Context, st statestore.Store, id string, after uint64, limit int) ([]*encoded.Event, error) {
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
		events, err := readEvents(ctx, f.st, f.id, f.next-1, replayPage)
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
