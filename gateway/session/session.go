package session

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/sourcegraph/jsonrpc2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Session is one live session: its agent, event log, tool calls, watchers
// and pending permission requests. Its methods are safe for concurrent use.
type Session struct {
	m       *Manager
	rec     statestore.Session // immutable identity: ID, Owner, Agent, Cwd, CreatedAt
	command []string
	log     *slog.Logger

	mu sync.Mutex
	// marshalled counts the events emitBodiesLocked marshalled whole, for
	// want of a body: the tests' check that updates come encoded.
	marshalled     int
	state          statestore.State
	detail         string
	agent          *agent.Agent
	agentSessionID string
	authMethod     string
	version        acpjson.Version
	attaching      bool
	// moved is set when another replica took the session over: this one
	// no longer writes to its log.
	moved bool
	// resumable is set when the agent's side of the session can be taken
	// back by a new agent (session/resume or session/load); see
	// keptSessionID.
	resumable bool
	// loading is set while the agent replays its conversation for
	// session/load: the log holds those updates already.
	loading bool
	// turnIdle is closed when an idle state_update arrives during a turn:
	// an ACP v2 turn ends there, with the stop reason it carries, rather
	// than at the session/prompt answer.
	turnIdle chan struct{}
	// turnSent is closed once the turn's session/prompt is written to the
	// agent (or could not be): a session/cancel waits for it, so that the
	// agent never sees the cancel before the prompt it cancels.
	turnSent   chan struct{}
	stopReason string
	// turnGen numbers the turns, so that a timer of one turn does nothing
	// to the next.
	turnGen uint64
	// turnCause is why the gateway itself is ending the turn (a Cause
	// constant), "" while it is not; turnTimers are the turn's timeout and
	// cancel grace, stopped when it ends.
	turnCause  string
	turnTimers []*time.Timer
	tools      *merge.State
	// calls encodes the merged calls of tools for their events, each
	// version from the one before.
	calls encoded.Calls
	// seq is the last event's seq, numbered; stored is the last the
	// store took, which watchers get (writer.go). The queue holds the
	// events between, unstored bytes of encodings, while writing says the
	// writer runs; progress, when set, is closed as the queue shrinks.
	// storeErr is set when the writer gave up on the store.
	seq, stored uint64
	queue       []pending
	unstored    int
	writing     bool
	progress    chan struct{}
	halted      chan struct{} // closed to stop the writer (writer.go)
	// inflight is the first event of the append under way (writer.go).
	inflight *encoded.Event
	storeErr error
	subs     map[*Subscription]struct{}
	// live holds the last live events for the subscriptions; nil while
	// there is none.
	live  *ring
	turn  bool
	perms map[string]*permission
	// pending counts the requests of perms not answered yet; answered
	// holds the ids of those answered, oldest first, which perms keeps
	// (to tell a late answer so) up to maxAnswered of.
	pending  int
	answered []string
	// refusals counts the tool-call updates and permission requests
	// refused at the session's bounds; the first of each kind is logged.
	refusedTools, refusedPerms int
	idle                       *time.Timer
	// met records the session's metrics while this gateway runs it; nil
	// otherwise.
	met *metrics.Session
	// toolStarted holds when this gateway first saw each tool call that
	// has not finished, for the metrics' durations.
	toolStarted map[string]time.Time
	turnStart   time.Time
	// fence freezes the agent when the session's lease may lapse
	// (fence.go).
	fence fence
}

// maxAnswered bounds the answered permission requests a session keeps,
// to tell a late answer that the request was answered (rather than that
// there is no such request).
const maxAnswered = 256

type permission struct {
	options  []*acpv2.PermissionOption
	reply    chan *acpv2.PermissionOutcome
	resolved bool
	timedOut bool
	asked    time.Time
	timer    *time.Timer
}

func newSession(m *Manager, rec *statestore.Session, command []string) *Session {
	return &Session{
		m:           m,
		rec:         *rec,
		command:     command,
		log:         m.opts.Log.With("session", rec.ID, "agent", rec.Agent, "user", rec.Owner),
		state:       rec.State,
		tools:       merge.New(),
		subs:        map[*Subscription]struct{}{},
		perms:       map[string]*permission{},
		toolStarted: map[string]time.Time{},
	}
}

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

// ID is the session's id.
func (s *Session) ID() string { return s.rec.ID }

// attach spawns the agent and authenticates with authMethod when one is
// named. A new session gets session/new; a re-attach (after the agent was
// lost) gets session/resume or session/load with the agent's session id,
// whichever the agent offers, and when it offers neither (or its session
// id was not kept), session/new: a new agent session that does not know
// the earlier turns, which the state's detail says.
func (s *Session) attach(ctx context.Context, authMethod string, reattach bool) error {
	started := time.Now()
	cfg, err := s.m.agentConfig(s)
	var a *agent.Agent
	if err == nil {
		a, err = agent.Start(ctx, cfg)
	}
	if err != nil {
		s.met.AgentExited("start_failed")
		s.setState(statestore.StateAgentLost, err.Error())
		if errors.Is(err, ErrPermission) {
			return err // its working directory is no longer the one checked
		}
		return fmt.Errorf("%w: %v", ErrAgentGone, err)
	}
	s.met.AgentStarted(time.Since(started))
	fail := func(err error) error {
		a.Close()
		s.met.AgentExited(a.Reason())
		s.setState(statestore.StateAgentLost, err.Error())
		return err
	}
	if err := a.CheckMCP(cfg.MCPServers); err != nil {
		if reattach {
			return fail(fmt.Errorf("%w: %v", ErrCannotReattach, err))
		}
		return fail(fmt.Errorf("%w: %v", ErrInvalid, err))
	}
	if authMethod != "" {
		if err := authenticate(ctx, a, authMethod); err != nil {
			return fail(err)
		}
	}
	authErr := func(err error) bool {
		var rpcErr *agent.RPCError
		return errors.As(err, &rpcErr) && rpcErr.Code == agent.CodeAuthRequired
	}
	s.mu.Lock()
	agentSID := s.agentSessionID
	s.mu.Unlock()
	var how string
	caps := a.Capabilities()
	switch {
	case !reattach || agentSID == "" || !caps.Resume && !caps.Load:
		if reattach {
			how = detailFreshSession
		}
		agentSID, err = a.NewSession(ctx, s.rec.Cwd)
		if authErr(err) && reattach {
			return fail(fmt.Errorf("%w: the agent requires authentication to start a new session", ErrCannotReattach))
		}
		if authErr(err) {
			return fail(fmt.Errorf("%w: the agent requires authentication: name one of its methods %v in authMethod", ErrInvalid, a.AuthMethodIDs()))
		}
		if err != nil {
			// What the agent said, where it answered: not a lost agent.
			return fail(agentCallErr("session/new", err))
		}
	case caps.Resume:
		how = "re-attached with session/resume"
		err = a.Resume(ctx, agentSID, s.rec.Cwd)
	default:
		how = "re-attached with session/load"
		// The agent replays the conversation, which the log holds already.
		s.mu.Lock()
		s.loading = true
		s.mu.Unlock()
		err = a.Load(ctx, agentSID, s.rec.Cwd)
		s.mu.Lock()
		s.loading = false
		s.mu.Unlock()
	}
	if err != nil {
		if authErr(err) {
			return fail(fmt.Errorf("%w: the agent requires authentication to re-attach", ErrCannotReattach))
		}
		return fail(fmt.Errorf("%w: %s: %v", ErrAgentGone, how, err))
	}
	s.mu.Lock()
	if s.state == statestore.StateClosed {
		s.mu.Unlock()
		a.Close()
		s.met.AgentExited(a.Reason())
		return ErrClosed
	}
	s.agent, s.agentSessionID, s.version, s.authMethod = a, agentSID, a.Version(), authMethod
	s.resumable = caps.Resume || caps.Load
	s.mu.Unlock()
	if err := s.m.opts.Store.SetAgentSession(ctx, s.rec.ID, keptSessionID(agentSID, caps), int(a.Version())); err != nil {
		s.log.ErrorContext(ctx, "store: recording the agent session", "error", err)
	}
	s.mu.Lock()
	s.setStateLocked(statestore.StateReady, how)
	if reattach {
		s.log.InfoContext(ctx, "agent "+how)
		_ = s.emitLocked([]*acpv2.SessionEvent{stateEvent(statestore.StateReady, how)}, nil)
	}
	s.touchLocked()
	s.mu.Unlock()
	s.m.wg.Add(1)
	a.OnDone(func() { s.watchAgent(a) })
	return nil
}

func stateEvent(state statestore.State, detail string) *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_StateChanged{
		StateChanged: &acpv2.SessionStateChanged{State: string(state), Detail: detail}}}
}

// reattach starts a new agent for a session whose agent was lost. Only one
// request re-attaches at a time; the others are told to retry.
func (s *Session) reattach(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.state == statestore.StateClosed:
		s.mu.Unlock()
		return ErrClosed
	case s.agent != nil:
		s.mu.Unlock()
		return nil
	case s.attaching:
		s.mu.Unlock()
		return fmt.Errorf("%w: it is being re-attached; retry", ErrAgentGone)
	case s.moved:
		s.mu.Unlock()
		return ErrMoved
	case len(s.command) == 0:
		s.mu.Unlock()
		return fmt.Errorf("%w: agent %q is not configured on this gateway", ErrCannotReattach, s.rec.Agent)
	case s.fenced():
		s.mu.Unlock()
		return ErrStoreRecovering // no new agent while the lease may lapse
	}
	s.attaching = true
	authMethod := s.authMethod
	s.mu.Unlock()
	err := s.attach(ctx, authMethod, true)
	s.mu.Lock()
	s.attaching = false
	s.mu.Unlock()
	return err
}

func (s *Session) setState(state statestore.State, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStateLocked(state, detail)
}

// maxDetail bounds the detail of a session's state (an agent's error can
// be as long as a line of its output), which every snapshot carries.
const maxDetail = 4 << 10

// setStateLocked records the session's state. s.mu must be held.
func (s *Session) setStateLocked(state statestore.State, detail string) {
	if len(detail) > maxDetail {
		detail = strings.ToValidUTF8(detail[:maxDetail], "") + "…"
	}
	s.state, s.detail = state, detail
	if s.startWriterLocked() {
		// After the events before it, from the writer: no store call is
		// made with the lock held.
		s.enqueueLocked(pending{state: &stateChange{state, detail}})
		return
	}
	// The manager is closed (a shutdown): no writer starts any more.
	ctx, cancel := s.m.storeContext()
	defer cancel()
	if err := s.m.opts.Store.SetState(ctx, s.rec.ID, state, detail); err != nil {
		s.log.Error("store: recording the session state", "error", err)
	}
}

// watchAgent records the agent's end and releases what it held: its pipes,
// its file root, and any process it left in its group.
func (s *Session) watchAgent(a *agent.Agent) {
	defer s.m.wg.Done()
	<-a.Done()
	s.mu.Lock()
	s.agentLostLocked(a)
	s.mu.Unlock()
	a.Close()
}

// agentLostLocked records that agent a has ended, if it is still the
// session's agent: no prompt reaches it any more, its pending permission
// requests are cancelled, and its exit is counted. The turn that saw the
// agent fail, the agent's watcher and endAgent call it, whichever is
// first. s.mu must be held.
func (s *Session) agentLostLocked(a *agent.Agent) {
	if s.agent != a {
		return
	}
	s.agent = nil
	// a.Err, which the turn checks, is set just before Done is closed.
	<-a.Done()
	s.met.AgentExited(a.Reason())
	for id := range s.perms {
		s.resolveLocked(id, cancelled(), AnsweredByCancel)
	}
	if s.state != statestore.StateClosed && !s.moved {
		s.log.Warn("agent lost", "reason", a.Err())
		detail := a.Err().Error()
		if !s.resumable {
			detail += detailFreshNext
		}
		s.setStateLocked(statestore.StateAgentLost, detail)
		_ = s.emitLocked([]*acpv2.SessionEvent{stateEvent(statestore.StateAgentLost, detail)}, nil)
	}
}

func cancelled() *acpv2.PermissionOutcome {
	return &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_Cancelled{Cancelled: true}}
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
	events := make([]*acpv2.SessionEvent, 0, 2*len(updates))
	bodies := make([]encoded.Body, 0, 2*len(updates))
	var changed []toolChange
	for _, up := range updates {
		u, err := up.Update, up.Err
		if err != nil {
			// u holds what the agent sent, kept whole rather than dropped.
			s.log.Warn("agent sent an update that does not decode", "error", err)
		}
		if st := u.GetStateUpdate(); st.GetState() == "idle" && s.turnIdle != nil {
			s.stopReason = st.GetStopReason()
			close(s.turnIdle)
			s.turnIdle = nil
		}
		s.met.Update(updateKind(u))
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

// Who answered a permission request other than a user
// (PermissionResolved.answered_by).
const (
	AnsweredByAgent   = "agent"   // the agent withdrew it
	AnsweredByTimeout = "timeout" // PermissionTimeout passed
	AnsweredByCancel  = "cancel"  // its turn was cancelled or ended first
	// AnsweredByUser is a user's answer: "user" without authentication,
	// "user:NAME" with it.
	AnsweredByUser = "user"
)

// RequestPermission implements agent.Client.
func (s *Session) RequestPermission(params json.RawMessage) (<-chan *acpv2.PermissionOutcome, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit := s.m.opts.MaxPendingPermissions; limit > 0 && s.pending >= limit {
		if s.refusedPerms++; s.refusedPerms == 1 {
			s.log.Warn("permission request refused: too many are waiting for an answer (further refusals are not logged)", "pending", s.pending, "limit", limit)
		}
		return nil, nil, fmt.Errorf("%d permission requests of this session are waiting for an answer, the gateway's limit (--max-pending-permissions): wait for one to be answered", s.pending)
	}
	req, err := acpjson.DecodePermissionRequest(params, s.version)
	if err != nil {
		s.log.Warn("agent sent a malformed permission request", "error", err)
		return nil, nil, err
	}
	// Named after the seq of its event: unique in the session for good,
	// across restarts and replicas.
	id := fmt.Sprintf("perm-%d", s.seq+1)
	req.RequestId = id
	if req.GetToolCall() != nil {
		// The call it names may not have been reported yet: preview it
		// anyway, without storing.
		if preview, err := s.tools.Preview(req.GetToolCall()); err == nil {
			req.Preview = preview
		}
	}
	p := &permission{options: req.GetOptions(), reply: make(chan *acpv2.PermissionOutcome, 1), asked: time.Now()}
	s.perms[id] = p
	s.pending++
	if err := s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_PermissionRequest{PermissionRequest: req}}}, nil); err != nil {
		delete(s.perms, id)
		s.pending--
		return nil, nil, errors.New("the gateway could not store the request")
	}
	p.timer = time.AfterFunc(s.m.opts.PermissionTimeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !p.resolved {
			s.log.Info("permission request timed out", "request", id)
			p.timedOut = true
			s.resolveLocked(id, cancelled(), AnsweredByTimeout)
		}
	})
	withdraw := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !p.resolved {
			s.log.Info("the agent withdrew its permission request", "request", id)
			s.resolveLocked(id, cancelled(), AnsweredByAgent)
		}
	}
	return p.reply, withdraw, nil
}

// outcomeLabel names outcome for the metrics: the chosen option's kind,
// cancelled or timed_out.
func (p *permission) outcomeLabel(outcome *acpv2.PermissionOutcome) string {
	if p.timedOut {
		return "timed_out"
	}
	if id := outcome.GetSelectedOptionId(); id != "" {
		for _, o := range p.options {
			if o.GetOptionId() == id {
				return o.GetKind()
			}
		}
	}
	return "cancelled"
}

// resolveLocked answers permission request id with outcome, as by (a
// user, or AnsweredByAgent...). s.mu must be held.
func (s *Session) resolveLocked(id string, outcome *acpv2.PermissionOutcome, by string) {
	p := s.perms[id]
	if p == nil || p.resolved {
		return
	}
	p.resolved = true
	s.pending--
	if p.timer != nil {
		p.timer.Stop()
	}
	s.met.PermissionAnswered(p.outcomeLabel(outcome), time.Since(p.asked))
	// What an answered request keeps: that it was answered, for a while.
	p.options, p.timer = nil, nil
	s.answered = append(s.answered, id)
	if len(s.answered) > maxAnswered {
		delete(s.perms, s.answered[0])
		s.answered = slices.Delete(s.answered, 0, 1)
	}
	_ = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_PermissionResolved{
		PermissionResolved: &acpv2.PermissionResolved{RequestId: id, Outcome: outcome, AnsweredBy: by}}}}, nil)
	p.reply <- outcome
	close(p.reply)
}

// RespondPermission answers permission request id with optionID, or
// cancels it, as user ("" without authentication).
func (s *Session) RespondPermission(id, optionID string, cancel bool, user string) error {
	// A user's name is prefixed, so that no user named like the other
	// answers (agent, timeout...) passes for them.
	if user == "" {
		user = AnsweredByUser
	} else {
		user = AnsweredByUser + ":" + user
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.perms[id]
	if p == nil {
		return fmt.Errorf("%w %q", ErrNoRequest, id)
	}
	if p.resolved {
		return fmt.Errorf("%w: %s", ErrAlreadyAnswered, id)
	}
	if cancel {
		s.resolveLocked(id, cancelled(), user)
		return nil
	}
	if !slices.ContainsFunc(p.options, func(o *acpv2.PermissionOption) bool { return o.GetOptionId() == optionID }) {
		return fmt.Errorf("%w: option %q is not one the request offers", ErrInvalid, optionID)
	}
	s.resolveLocked(id, &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_SelectedOptionId{SelectedOptionId: optionID}}, user)
	return nil
}

// Prompt starts a turn and returns a subscription positioned just before
// its turn_started event.
//
// A session whose agent was lost gets a new agent first, re-attached to the
// agent's side of the session where the agent allows it.
func (s *Session) Prompt(ctx context.Context, prompt []*acpv2.ContentBlock) (*Subscription, error) {
	if err := s.reattach(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state == statestore.StateClosed:
		return nil, ErrClosed
	case s.turn:
		return nil, ErrBusy
	case s.agent == nil:
		return nil, fmt.Errorf("%w (%s)", ErrAgentGone, s.detail)
	}
	if err := checkPrompt(s.agent.Profile().Prompt, prompt); err != nil {
		return nil, err
	}
	sub := s.subscribeLocked(s.seq)
	if err := s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_TurnStarted{
		TurnStarted: &acpv2.TurnStarted{Prompt: prompt}}}}, nil); err != nil {
		s.unsubscribeLocked(sub, err)
		return nil, err
	}
	s.turn, s.turnStart = true, time.Now()
	s.stopReason, s.turnIdle = "", make(chan struct{})
	s.turnSent = make(chan struct{})
	s.turnGen++
	s.turnCause = ""
	s.stopIdleLocked()
	a, agentSID := s.agent, s.agentSessionID
	if d := s.m.opts.TurnTimeout; d > 0 {
		gen := s.turnGen
		s.turnTimers = append(s.turnTimers, time.AfterFunc(d, func() { s.interrupt(gen, CauseTurnTimeout) }))
	}
	s.m.wg.Add(1)
	// The turn outlives the request, but keeps its values: the trace
	// context for the agent, the request id for the logs.
	go s.runTurn(context.WithoutCancel(ctx), a, agentSID, prompt, s.turnIdle, s.turnSent)
	return sub, nil
}

// runTurn runs a prompt turn; idle is closed by the idle state_update that
// ends an ACP v2 turn, and sent once the prompt is written to the agent.
func (s *Session) runTurn(ctx context.Context, a *agent.Agent, agentSID string, prompt []*acpv2.ContentBlock, idle <-chan struct{}, sent chan struct{}) {
	defer s.m.wg.Done()
	markSent := sync.OnceFunc(func() { close(sent) })
	reason, err := a.Prompt(ctx, agentSID, prompt, markSent)
	markSent() // when the prompt could not be written
	if err == nil && a.Version() >= acpjson.V2 {
		select {
		case <-idle:
		case <-a.Done():
			err = a.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turnIdle = nil
	for _, t := range s.turnTimers {
		t.Stop()
	}
	s.turnTimers = nil
	cause := s.turnCause
	// A permission request cannot outlive its turn.
	for id := range s.perms {
		s.resolveLocked(id, cancelled(), AnsweredByCancel)
	}
	if a.Err() != nil {
		// Record the loss before the turn's end, so that a client reacting
		// to turn_ended finds the agent gone.
		s.agentLostLocked(a)
	}
	if reason == "" {
		reason = s.stopReason
	}
	if reason == "" {
		reason = "end_turn"
	}
	if cause != "" {
		// The gateway ended the turn: cancelled, whether the agent ended
		// it so or had to be stopped.
		reason, err = "cancelled", nil
		s.log.WarnContext(ctx, "turn ended by the gateway", "cause", cause)
	}
	ended := &acpv2.TurnEnded{StopReason: reason, Reason: acpjson.StopReason(reason), Cause: cause}
	if err != nil {
		ended = &acpv2.TurnEnded{Error: err.Error()}
		s.log.WarnContext(ctx, "turn failed", "error", err)
		reason = "error"
	}
	s.met.TurnEnded(reason, time.Since(s.turnStart))
	_ = s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: ended}}}, nil)
	s.turn = false
	// The session may now stay idle for long: its tool calls wait in wire
	// form until the next update needs them.
	s.tools.Compact()
	s.calls.Reset()
	s.touchLocked()
}

// Cancel cancels the running turn: every pending permission request is
// answered cancelled, as ACP requires, and the agent gets session/cancel;
// the agent is stopped if the turn still runs Options.CancelGrace later.
// Cancel waits, while ctx allows, until session/cancel is written (or its
// write failed: the agent is ending, and so is the turn), which is at most
// until the agent is stopped.
func (s *Session) Cancel(ctx context.Context) error {
	s.mu.Lock()
	if !s.turn {
		s.mu.Unlock()
		return ErrNoTurn
	}
	written := s.cancelLocked(CauseCancelTimeout)
	s.mu.Unlock()
	select {
	case <-written:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cancelLocked cancels the running turn, as Cancel says, the agent being
// stopped for cause if it does not end the turn within the grace. The
// channel returned is closed once session/cancel is written, or its write
// failed. s.mu must be held, and a turn running.
//
// The grace is armed first, before anything is written to the agent: an
// agent that no longer reads its input blocks the write of session/cancel
// (jsonrpc2 writes one message at a time, honouring no context), or of the
// prompt it waits for, for ever. Stopping the agent closes its input,
// which ends such a write. The writes are done apart from the caller.
func (s *Session) cancelLocked(cause string) <-chan struct{} {
	a, agentSID, sent, gen := s.agent, s.agentSessionID, s.turnSent, s.turnGen
	s.armGraceLocked(gen, cause)
	written := make(chan struct{})
	if a == nil { // the turn is ending with the agent
		for id := range s.perms {
			s.resolveLocked(id, cancelled(), AnsweredByCancel)
		}
		close(written)
		return written
	}
	running := func() bool { return s.turn && s.turnGen == gen }
	// The turn's own count keeps the WaitGroup above zero here.
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		defer close(written)
		// session/cancel first, as ACP orders it: an agent that sees its
		// permission request cancelled then knows the turn is being
		// cancelled. It waits for the prompt to be written: a cancel the
		// agent read before the prompt would cancel nothing.
		<-sent
		s.mu.Lock()
		ok := running()
		s.mu.Unlock()
		if !ok {
			return // the turn ended, and its end answered the requests
		}
		if err := a.Cancel(context.Background(), agentSID); err != nil {
			s.log.Warn("sending session/cancel failed", "error", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if running() {
			for id := range s.perms {
				s.resolveLocked(id, cancelled(), AnsweredByCancel)
			}
		}
	}()
	return written
}

// Why the gateway ended a turn itself, as TurnEnded.cause says.
const (
	// CauseTurnTimeout: the turn ran longer than Options.TurnTimeout; the
	// agent was sent session/cancel, and stopped if it did not end the
	// turn within Options.CancelGrace.
	CauseTurnTimeout = "turn_timeout"
	// CauseCancelTimeout: the agent did not end its turn within
	// Options.CancelGrace of a Cancel, and was stopped.
	CauseCancelTimeout = "cancel_timeout"
)

// interrupt cancels turn gen, if it still runs, for cause: as Cancel
// does, and with the same grace before the agent is stopped.
func (s *Session) interrupt(gen uint64, cause string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.turn || s.turnGen != gen {
		return
	}
	s.turnCause = cause
	s.cancelLocked(CauseCancelTimeout)
}

// armGraceLocked stops the agent of turn gen if the turn still runs
// CancelGrace from now, for cause (unless a cause was set before). s.mu
// must be held.
func (s *Session) armGraceLocked(gen uint64, cause string) {
	if !s.turn || s.turnGen != gen {
		return
	}
	s.turnTimers = append(s.turnTimers, time.AfterFunc(s.m.opts.CancelGrace, func() {
		s.mu.Lock()
		a := s.agent
		if !s.turn || s.turnGen != gen || a == nil {
			s.mu.Unlock()
			return
		}
		if s.turnCause == "" {
			s.turnCause = cause
		}
		s.mu.Unlock()
		s.log.Warn("the agent did not end its turn after session/cancel: stopping it", "grace", s.m.opts.CancelGrace.String())
		a.Close()
	}))
}

// Watch returns a subscription to events after afterSeq.
func (s *Session) Watch(afterSeq uint64) *Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.subscribeLocked(afterSeq)
	switch {
	case s.state == statestore.StateClosed:
		// Nothing more will come: the stored events, then the end.
		s.unsubscribeLocked(sub, ErrClosed)
		return sub
	case s.moved:
		s.unsubscribeLocked(sub, ErrMoved)
		return sub
	case s.storeErr != nil:
		s.unsubscribeLocked(sub, s.storeErr)
		return sub
	}
	s.stopIdleLocked()
	return sub
}

// Snapshot returns the session's merged state.
func (s *Session) Snapshot() *acpv2.SessionSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &acpv2.SessionSnapshot{
		SessionId:   s.rec.ID,
		ToolCalls:   s.tools.Snapshot(),
		Agent:       s.rec.Agent,
		Cwd:         s.rec.Cwd,
		LastSeq:     s.seq, // what the tool calls reflect; a Watch after it waits for the store
		CreatedAt:   timestamppb.New(s.rec.CreatedAt),
		State:       string(s.state),
		StateDetail: s.detail,

		// The next agent cannot take back the lost one's session.
		AgentContextLost: s.state == statestore.StateAgentLost && !s.resumable,
	}
}

// agentCloseTimeout bounds the wait for an agent's answer to
// session/close as its session is closed.
const agentCloseTimeout = 5 * time.Second

// Close ends the session and its agent, which is first asked to close
// its session when it offers session/close. Watchers' streams end, after
// the closed event.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.state == statestore.StateClosed {
		s.mu.Unlock()
		return nil
	}
	s.state = statestore.StateClosed
	a, agentSID := s.agent, s.agentSessionID
	s.mu.Unlock()
	if a != nil && a.Capabilities().Close {
		// The agent frees what it holds for the session (its history
		// among it) before it is stopped. Only here: an agent stopped
		// for idleness or a shutdown keeps its session, to resume it.
		s.askAgent("close", func(ctx context.Context) error { return a.CloseSession(ctx, agentSID) })
	}
	s.endAgent()
	s.mu.Lock()
	// The closed event is stored before the state that says the session
	// is closed: a reader of a closed session reads it from the store.
	_ = s.emitLocked([]*acpv2.SessionEvent{stateEvent(statestore.StateClosed, "closed by the client")}, nil)
	s.setStateLocked(statestore.StateClosed, "closed by the client")
	s.mu.Unlock()
	s.release(ErrClosed)
	s.m.ended(s)
	return nil
}

// askAgent makes call, a request to the agent to end its session in some
// way (what: close, delete), within agentCloseTimeout; a failure is only
// logged, as the session ends all the same.
func (s *Session) askAgent(what string, call func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), agentCloseTimeout)
	defer cancel()
	if err := call(ctx); err != nil {
		s.log.Warn("the agent did not "+what+" its session", "error", err)
	}
}

// Delete closes the session, asks its agent (if it runs) to delete its
// own history of it when it offers session/delete, and removes the
// session's record and log from the store.
func (s *Session) Delete() error {
	s.mu.Lock()
	a, agentSID := s.agent, s.agentSessionID
	s.mu.Unlock()
	if a != nil && a.Capabilities().Delete {
		s.askAgent("delete", func(ctx context.Context) error { return a.DeleteSession(ctx, agentSID) })
	}
	if err := s.Close(); err != nil {
		return err
	}
	ctx, cancel := s.m.storeContext()
	defer cancel()
	if err := s.m.opts.Store.DeleteSession(ctx, s.rec.ID); err != nil && !errors.Is(err, statestore.ErrNotFound) {
		return fmt.Errorf("deleting the session from the store: %w", err)
	}
	s.log.Info("session deleted")
	return nil
}

// evict lets go of a session another replica took over: its agent ends
// without a word in the log, which is the new owner's, and its watchers are
// told to resume elsewhere.
func (s *Session) evict() {
	s.mu.Lock()
	s.moved = true
	s.stopWritingLocked()
	s.mu.Unlock()
	s.release(ErrMoved)
}

// shutdown ends the agent for a gateway shutdown, and with it the running
// turn, whose end says why.
func (s *Session) shutdown() {
	s.mu.Lock()
	if s.turn && s.turnCause == "" {
		s.turnCause = CauseGatewayShutdown
	}
	s.mu.Unlock()
	s.release(ErrShutdown)
	s.met.End()
}

// release ends the agent, then the watchers' streams with err, so that
// they get whatever the agent's end records first.
func (s *Session) release(err error) {
	s.endAgent()
	// What the agent's end recorded, and all before, reaches the watchers
	// first, unless the store is down.
	ctx, cancel := context.WithTimeout(context.Background(), s.m.releaseFlush())
	if ferr := s.flush(ctx); errors.Is(ferr, context.DeadlineExceeded) {
		s.mu.Lock()
		if s.storeErr == nil {
			s.storeErr = fmt.Errorf("%w: %d events after seq %d were not stored as the session ended", ErrStoreUnavailable, s.seq-s.stored, s.stored)
			s.log.Error("store: events not stored as the session ended", "error", s.storeErr)
			s.stopWritingLocked() // its writer counts what it lets go
		}
		s.mu.Unlock()
	}
	cancel()
	s.mu.Lock()
	if s.storeErr != nil && !errors.Is(err, ErrDataLost) {
		// What was not stored was not delivered either: the streams say
		// so, rather than ending as if whole.
		err = s.storeErr
	}
	for sub := range s.subs {
		s.unsubscribeLocked(sub, err)
	}
	s.mu.Unlock()
}

// endAgent ends the session's agent, if it has one, and records its end
// before it returns, rather than when the agent's watcher gets to it.
func (s *Session) endAgent() {
	s.mu.Lock()
	a := s.agent
	s.stopIdleLocked()
	s.mu.Unlock()
	if a == nil {
		return
	}
	a.Close()
	s.mu.Lock()
	s.agentLostLocked(a)
	s.mu.Unlock()
}

// touchLocked arms the idle timer when nothing uses the agent.
func (s *Session) touchLocked() {
	if s.m.opts.IdleTimeout < 0 || s.turn || len(s.subs) > 0 || s.agent == nil {
		return
	}
	s.stopIdleLocked()
	a := s.agent
	s.idle = time.AfterFunc(s.m.opts.IdleTimeout, func() {
		s.mu.Lock()
		still := s.agent == a && !s.turn && len(s.subs) == 0
		s.mu.Unlock()
		if still {
			s.log.Info("ending idle agent", "idle", s.m.opts.IdleTimeout)
			a.Close()
		}
	})
}

func (s *Session) stopIdleLocked() {
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
}

// liveAgent returns the session's agent, re-attaching a lost one first.
func (s *Session) liveAgent(ctx context.Context) (*agent.Agent, string, error) {
	if err := s.reattach(ctx); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agent == nil {
		return nil, "", fmt.Errorf("%w (%s)", ErrAgentGone, s.detail)
	}
	return s.agent, s.agentSessionID, nil
}

// agentCallErr maps an agent's answer to a session error.
func agentCallErr(method string, err error) error {
	var rpcErr *agent.RPCError
	switch {
	case errors.Is(err, agent.ErrUnsupported):
		return fmt.Errorf("%w: the agent's ACP version has no %s", ErrUnsupported, method)
	case errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc2.CodeMethodNotFound:
		return fmt.Errorf("%w: the agent does not implement %s", ErrUnsupported, method)
	case errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc2.CodeInvalidParams:
		return fmt.Errorf("%w: the agent refused the %s arguments: %s", ErrInvalid, method, rpcErr.Message)
	case errors.As(err, &rpcErr):
		return fmt.Errorf("%w: %s", ErrAgentRefused, rpcErr.Message)
	}
	return fmt.Errorf("%w: %s: %v", ErrAgentGone, method, err)
}

// SetMode switches the agent's session mode (ACP v1 session/set_mode). The
// agent reports the switch with a current_mode_update.
func (s *Session) SetMode(ctx context.Context, modeID string) error {
	a, sid, err := s.liveAgent(ctx)
	if err != nil {
		return err
	}
	if err := a.SetMode(ctx, sid, modeID); err != nil {
		return agentCallErr("session/set_mode", err)
	}
	return nil
}

// SetConfigOption sets configID to value (a string value id or a bool) and
// returns every option with its value. The options are also recorded as a
// config_option_update event, so watchers see the change.
func (s *Session) SetConfigOption(ctx context.Context, configID string, value any) ([]*acpv2.SessionConfigOption, error) {
	a, sid, err := s.liveAgent(ctx)
	if err != nil {
		return nil, err
	}
	raw, err := a.SetConfigOption(ctx, sid, configID, value)
	if err != nil {
		return nil, agentCallErr("session/set_config_option", err)
	}
	update := &acpv2.ConfigOptionUpdate{}
	if len(raw) > 0 {
		if err := acpjson.Decode([]byte(`{"configOptions":`+string(raw)+`}`), update, a.Version()); err != nil {
			return nil, fmt.Errorf("%w: the agent answered session/set_config_option with options that do not decode: %v", ErrAgentRefused, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.emitLocked([]*acpv2.SessionEvent{{Event: &acpv2.SessionEvent_ConfigOptionUpdate{ConfigOptionUpdate: update}}}, nil); err != nil {
		return nil, err
	}
	return update.GetConfigOptions(), nil
}
