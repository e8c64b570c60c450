package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	"github.com/acp-gateway/acp-gateway/gateway/sessionstate"
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
	live *ring
	turn bool
	// asks holds the agent's permission requests and elicitations
	// (permissions.go).
	asks map[string]*ask
	// pending counts the requests of asks not answered yet; answered
	// holds the ids of those answered, oldest first, which asks keeps
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
	// sstate is the session's materialised state, fed every event
	// emitted (emitBodiesLocked); sstateDirty says it changed since it
	// was last queued for the store, which takes it with the next events.
	sstate      *sessionstate.State
	sstateDirty bool
	// lastTime is the time of the session's last event.
	lastTime *timestamppb.Timestamp
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
		asks:        map[string]*ask{},
		toolStarted: map[string]time.Time{},
		sstate:      &sessionstate.State{},
	}
}

// ID is the session's id.
func (s *Session) ID() string { return s.rec.ID }

func stateEvent(state statestore.State, detail string) *acpv2.SessionEvent {
	return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_StateChanged{
		StateChanged: &acpv2.SessionStateChanged{State: string(state), Detail: detail}}}
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
	snap := &acpv2.SessionSnapshot{
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

		PendingElicitations: s.pendingElicitationsLocked(),
	}
	s.sstate.Fill(snap)
	if len(snap.GetPendingPermissions()) > 0 {
		withPreviews(snap, s.tools.Get)
	}
	snap.UpdatedAt = s.lastTime
	return snap
}

// Summary returns the session's summary.
func (s *Session) Summary() *acpv2.SessionSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := &acpv2.SessionSummary{
		SessionId: s.rec.ID, Agent: s.rec.Agent, Cwd: s.rec.Cwd, LastSeq: s.stored,
		CreatedAt: timestamppb.New(s.rec.CreatedAt), State: string(s.state), StateDetail: s.detail,
		UpdatedAt: s.lastTime,
	}
	s.sstate.Summarise(sum)
	return sum
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
