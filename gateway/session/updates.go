package session

import (
	"cmp"
	"fmt"
	"strings"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	"github.com/acp-gateway/acp-gateway/gateway/sessionstate"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// toolStatus is tc's status, ACP's default when it names none; "" for no
// call (one not seen yet).
func toolStatus(tc *acpv2.ToolCall) string {
	if tc == nil {
		return ""
	}
	if st := tc.GetStatus(); st != "" {
		return st
	}
	return "pending" // ACP's default
}

func finished(status string) bool { return merge.Finished(status) }

// trackToolLocked records in the metrics that tool call tc went from status
// from ("" for a call new to this gateway) to its own: the session's count
// of calls by status, and once the call finishes, how long it took from its
// first update here. s.mu must be held.
func (s *Session) trackToolLocked(from string, tc *acpv2.ToolCall) {
	to := toolStatus(tc)
	s.met.ToolStatus(from, to)
	id := tc.GetToolCallId()
	started, running := s.toolStarted[id]
	switch {
	case !finished(to):
		if !running {
			s.toolStarted[id] = time.Now()
		}
	case running:
		delete(s.toolStarted, id)
		s.met.ToolCallFinished(tc.GetKind(), to, time.Since(started))
	case from == "":
		s.met.ToolCallFinished(tc.GetKind(), to, 0) // with its first update
	}
}

// toolChange is a tool call that events emitted together changed: the
// call as it is after them, and the index among them of the merged call's
// event that holds it (-1 for none: a call trimmed to make room).
type toolChange struct {
	call  *acpv2.ToolCall
	event int
}

// emitLocked numbers events and queues them for the store, with the tool
// calls they changed; the watchers get them once stored (writer.go). It
// fails only when the session no longer writes to its log. s.mu must be
// held.
func (s *Session) emitLocked(events []*acpv2.SessionEvent, changed []toolChange) error {
	return s.emitBodiesLocked(events, nil, changed)
}

// emitBodiesLocked is emitLocked with, for each event that has one (bodies
// may be nil), the encoding of its event field made already: an update's,
// whose parts its merged call reuses, and a merged call's from
// encoded.Calls, made from the version before it. Each event is encoded once, here, for the store and the
// streams; a changed call whose merged event is among them is stored as
// the bytes of the call within that event's encoding. s.mu must be held.
func (s *Session) emitBodiesLocked(events []*acpv2.SessionEvent, bodies []encoded.Body, changed []toolChange) error {
	if s.moved {
		return ErrMoved
	}
	if s.storeErr != nil {
		return s.storeErr
	}
	if len(events) == 0 {
		return nil
	}
	now := timestamppb.Now()
	for i, ev := range events {
		ev.Seq = s.seq + uint64(i) + 1
		ev.Time = now
	}
	encs, marshalled, invalid := encoded.Numbered(events, bodies)
	s.marshalled += marshalled
	if invalid != nil {
		// Queued all the same, in order: the writer gives up on them, as
		// the store can never take them.
		invalid = fmt.Errorf("%w: %w", statestore.ErrInvalid, invalid)
	}
	calls := make([]statestore.Call, len(changed))
	for i, c := range changed {
		if c.event >= 0 {
			if b := encs[c.event].Field(encoded.ToolCall); b != nil {
				calls[i] = statestore.Call{ID: c.call.GetToolCallId(), Proto: b}
				continue
			}
		}
		var err error
		if calls[i], err = statestore.CallOf(c.call); err != nil {
			invalid = cmp.Or(invalid, err)
		}
	}
	if !s.startWriterLocked() {
		return ErrShutdown // after the manager closed: nothing is stored
	}
	for _, ev := range events {
		if s.sstate.Apply(ev) {
			s.sstateDirty = true
		}
	}
	s.lastTime = now
	if s.sstateDirty {
		// The state as these events leave it, stored with them.
		rec, err := s.sstate.Record()
		if err != nil {
			invalid = cmp.Or(invalid, err)
		}
		calls = append(calls, statestore.Call{ID: sessionstate.RecordID, Proto: rec})
		s.sstateDirty = false
	}
	s.seq += uint64(len(events))
	s.enqueueLocked(pending{events: encs, changed: calls, invalid: invalid})
	return nil
}

// sessionUpdates queues the updates' events for the store at once, and
// each tool call they changed once, as it is after the last of them.
func (s *Session) sessionUpdates(updates []agent.Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loading {
		return // history replayed by session/load
	}
	s.mergeLocked(updates, true)
}

// mergeLocked makes updates events, merging the tool calls they update,
// and queues them: the agent's (fromAgent), or the gateway's own, which
// the metrics do not count as the agent's updates. s.mu must be held.
func (s *Session) mergeLocked(updates []agent.Update, fromAgent bool) {
	events := make([]*acpv2.SessionEvent, 0, 2*len(updates))
	bodies := make([]encoded.Body, 0, 2*len(updates))
	var changed []toolChange
	for _, up := range updates {
		u, err := up.Update, up.Err
		if err != nil {
			// u holds what the agent sent, kept whole rather than dropped.
			s.log.Warn("agent sent an update that does not decode", "error", err)
		}
		if fromAgent { // the gateway's own end no turn, and are not counted
			if st := u.GetStateUpdate(); st.GetState() == "idle" && s.turnIdle != nil {
				s.stopReason = st.GetStopReason()
				close(s.turnIdle)
				s.turnIdle = nil
			}
			s.met.Update(updateKind(u))
		}
		ev := eventOf(u)
		bd := encoded.BodyOf(ev)
		if id, ok := toolCallID(u); ok {
			trimmed, refusal := s.admitToolLocked(id, len(bd.Bytes()))
			for _, tc := range trimmed {
				changed = replaceByID(changed, toolChange{tc, -1}, changeID)
				s.calls.Forget(tc.GetToolCallId())
			}
			if refusal != "" {
				u = s.refuseToolLocked(u, refusal)
				ev = eventOf(u)
				bd = encoded.BodyOf(ev)
			}
		}
		events, bodies = append(events, ev), append(bodies, bd)
		var merged *acpv2.ToolCall
		var was string // the call's status before
		var parts *encoded.Parts
		switch {
		case u.GetToolCallUpdate() != nil:
			was = toolStatus(s.tools.Get(u.GetToolCallUpdate().GetToolCallId()))
			merged, err = s.tools.ApplyUpdate(u.GetToolCallUpdate())
			parts = encoded.UpdateParts(u.GetToolCallUpdate(), bd.Bytes())
		case u.GetToolCallContentChunk() != nil:
			was = toolStatus(s.tools.Get(u.GetToolCallContentChunk().GetToolCallId()))
			merged, err = s.tools.ApplyChunk(u.GetToolCallContentChunk())
			parts = encoded.ChunkParts(u.GetToolCallContentChunk(), bd.Bytes())
		default:
			continue
		}
		if err != nil {
			s.log.Warn("tool-call update not merged", "error", err)
			continue
		}
		s.trackToolLocked(was, merged)
		changed = replaceByID(changed, toolChange{merged, len(events)}, changeID)
		// Encoded now, while it is the call's current version, from the
		// version before and the update's own encoding, with room for the
		// event's head.
		bd = s.calls.Body(merged, parts)
		if b := bd.Bytes(); b != nil {
			s.tools.Encoded(merged, b)
		}
		events = append(events, toolCallEvent(merged))
		bodies = append(bodies, bd)
		if finished(toolStatus(merged)) {
			// From now in wire form, from the encoding just made: a long
			// turn's finished calls would otherwise stay whole messages,
			// which the garbage collector walks in every cycle, until the
			// turn ends and Compact takes them all.
			s.tools.CompactCall(merged.GetToolCallId())
			s.calls.Forget(merged.GetToolCallId())
		}
	}
	_ = s.emitBodiesLocked(events, bodies, changed)
}

// SessionUpdates implements agent.Client: see sessionUpdates. The
// agent's output is read on only once the store has room for more.
func (s *Session) SessionUpdates(updates []agent.Update) {
	s.sessionUpdates(updates)
	s.waitRoom()
}

// toolCallID returns the id of the tool call u updates, if it updates one.
func toolCallID(u *acpv2.SessionUpdate) (string, bool) {
	switch v := u.GetUpdate().(type) {
	case *acpv2.SessionUpdate_ToolCallUpdate:
		return v.ToolCallUpdate.GetToolCallId(), true
	case *acpv2.SessionUpdate_ToolCallContentChunk:
		return v.ToolCallContentChunk.GetToolCallId(), true
	}
	return "", false
}

// maxToolCallID bounds the length of a tool call's id: a trimmed call
// keeps it whole, so the calls of a session fit in one response however
// many are trimmed.
const maxToolCallID = 256

// admitToolLocked decides whether an update of tool call id, whose
// encoding is size bytes, may be merged within the session's bounds
// (Options.MaxToolCalls and MaxToolCallBytes): it trims the oldest
// finished calls to make room, and returns them, for the store, and why
// the update is refused ("" when it is not). s.mu must be held.
func (s *Session) admitToolLocked(id string, size int) (trimmed []*acpv2.ToolCall, refusal string) {
	opts := &s.m.opts
	if !s.tools.Has(id) {
		switch {
		case id == "":
			return nil, "" // the merge refuses it, as it always did
		case len(id) > maxToolCallID || strings.ContainsFunc(id, unicode.IsControl):
			return nil, fmt.Sprintf("a tool call id longer than %d bytes or holding control characters", maxToolCallID)
		case opts.MaxToolCalls > 0 && s.tools.Len() >= opts.MaxToolCalls:
			return nil, fmt.Sprintf("a tool call past the session's %d, the limit (--max-tool-calls)", opts.MaxToolCalls)
		}
	}
	// The merged call grows by at most the update's encoding, and the
	// few bytes that frame it.
	growth := size + 16
	budget := opts.MaxToolCallBytes
	if budget <= 0 || s.tools.Bytes()+growth <= budget {
		return nil, ""
	}
	trimmed = s.tools.ThinOldest(budget-growth, id, merge.Finished)
	if s.tools.Bytes()+growth > budget {
		return trimmed, fmt.Sprintf("an update past the %d bytes the session's tool calls may take, with its finished calls trimmed (--max-response-bytes)", budget)
	}
	return trimmed, ""
}

// refuseToolLocked returns the unknown update that a tool-call update
// refused for reason is kept as: the update's ACP v2 JSON, as an update
// that does not decode is kept. The first refusal is logged. s.mu must
// be held.
func (s *Session) refuseToolLocked(u *acpv2.SessionUpdate, reason string) *acpv2.SessionUpdate {
	if s.refusedTools++; s.refusedTools == 1 {
		s.log.Warn("tool-call update refused: it is kept as an unknown update, not merged (further refusals are not logged)", "reason", reason)
	}
	tag := updateKind(u)
	var kept *acpv2.SessionUpdate
	if js, err := acpjson.EncodeUpdate(u, acpjson.V2); err == nil {
		kept = acpjson.KeepUnknown(js)
	}
	if kept == nil {
		kept = &acpv2.SessionUpdate{Update: &acpv2.SessionUpdate_Unknown{Unknown: &acpv2.UnknownUpdate{SessionUpdate: tag}}}
	}
	return kept
}

// replaceByID adds a tool call's change c to calls, in place of an
// earlier one of the same call (id gives a change's call id).
func replaceByID[C any](calls []C, c C, id func(C) string) []C {
	for i, old := range calls {
		if id(old) == id(c) {
			calls[i] = c
			return calls
		}
	}
	return append(calls, c)
}

func changeID(c toolChange) string { return c.call.GetToolCallId() }

func storedCallID(c statestore.Call) string { return c.ID }
