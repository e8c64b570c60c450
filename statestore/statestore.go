// Package statestore holds what a gateway must not lose about its sessions:
// the session records, each session's numbered event log, and its merged
// tool-call snapshots.
//
// A session's events are written by one writer at a time (the replica that
// runs its agent), which numbers them 1, 2, 3, ... Stores enforce that
// numbering, so a second writer is refused rather than allowed to fork the
// log. Readers on any replica replay the log by seq.
package statestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
)

var (
	// ErrNotFound is returned for a session the store does not hold.
	ErrNotFound = errors.New("statestore: session not found")
	// ErrExists is returned when creating a session whose id is taken.
	ErrExists = errors.New("statestore: session already exists")
	// ErrSeqConflict is returned by Append when the first event's seq is not
	// the session's last seq plus one.
	ErrSeqConflict = errors.New("statestore: event seq does not follow the log")
	// ErrDataLost is returned by a Pinger's Ping when the store lost data
	// it had taken: a Redis that restarted empty, or was flushed.
	ErrDataLost = errors.New("statestore: the store lost data it had taken")
	// ErrTrimmed is returned by Events when events after the given seq were
	// dropped by retention; the session's tool calls still hold their state.
	ErrTrimmed = errors.New("statestore: events were trimmed by retention")
	// ErrLeaseHeld is returned by AcquireLease when another holder's lease
	// on the session is live.
	ErrLeaseHeld = errors.New("statestore: another replica holds the session")
	// ErrInvalid marks events or tool calls that can never be stored (one
	// that does not encode, see CallOf): trying again cannot help.
	ErrInvalid = errors.New("statestore: the events cannot be stored")
)

// DefaultMaxEvents is serve's default for Options.MaxEvents.
const DefaultMaxEvents = 100000

// DefaultMaxEventBytes is serve's default for Options.MaxEventBytes.
const DefaultMaxEventBytes = 256 << 20

// DefaultMaxEndedSessions is serve's default for Options.MaxEndedSessions.
const DefaultMaxEndedSessions = 1000

// Options are the settings every store takes.
type Options struct {
	// MaxEvents caps the events kept per session; the oldest are dropped
	// first. Zero keeps every event.
	MaxEvents int
	// MaxEventBytes caps the bytes of the events kept per session (their
	// encodings); the oldest are dropped first, but a session's newest
	// event is always kept. Zero sets no cap. A tool call streamed in many
	// content chunks makes events whose sizes grow with it (each merged
	// call holds all its content so far), so its bytes grow as the square
	// of its length: MaxEvents alone does not bound them.
	MaxEventBytes int64
	// MaxEndedSessions caps the closed sessions kept. A SetState that
	// closes a session past it deletes the sessions that closed first, in
	// the same atomic step, so that no reader ever finds more than
	// MaxEndedSessions closed sessions; the one it closes is kept. A
	// session closed again counts as closed last; one that leaves the
	// closed state no longer counts. Zero keeps them all.
	MaxEndedSessions int
}

// Over reports whether a session's kept events, n of them holding bytes
// bytes of encodings, are over the caps: more than MaxEvents, or more than
// MaxEventBytes in more than one event (the newest is always kept). A
// store drops its oldest event while they are. (The Redis store's append
// script says the same in Lua.)
func (o Options) Over(n uint64, bytes int64) bool {
	if o.MaxEvents > 0 && n > uint64(o.MaxEvents) {
		return true
	}
	return o.MaxEventBytes > 0 && bytes > o.MaxEventBytes && n > 1
}

// State is where a session is in its life. It only moves forward, except
// that an agent-lost session may be re-attached (back to ready).
type State string

const (
	// StateStarting: the agent is being spawned and initialised.
	StateStarting State = "starting"
	// StateReady: the agent runs and accepts prompts.
	StateReady State = "ready"
	// StateAgentLost: the agent process is gone (it exited, or the gateway
	// that ran it restarted or died); a prompt may re-attach it.
	StateAgentLost State = "agent_lost"
	// StateClosed: the session was closed; its agent is gone for good.
	StateClosed State = "closed"
)

// Session is a session record.
type Session struct {
	ID    string
	Owner string
	Agent string
	Cwd   string
	State State
	// AgentSessionID is the agent's own ACP session id, used to re-attach
	// with session/load or session/resume; empty when the agent offers
	// neither, as there is nothing to re-attach to.
	AgentSessionID string
	// ProtocolVersion is the ACP version the agent negotiated.
	ProtocolVersion int
	// MCPServers are the MCP servers the client gave the session, as the
	// gateway encoded them (opaque to the store, kept as given: they
	// may hold secrets, and are never shown to clients); nil for none.
	MCPServers []byte
	CreatedAt  time.Time
	// LastSeq is the seq of the last stored event (0 before the first).
	LastSeq uint64
	// TrimmedSeq is the seq of the last event dropped by retention (0 when
	// none was): Events after a smaller seq fail with ErrTrimmed.
	TrimmedSeq uint64
	// Detail says why the session is in its state, e.g. how the agent ended.
	Detail string
	// StateChangedAt is when SetState last set State (zero before the
	// first SetState): for a closed session, when it closed.
	StateChangedAt time.Time
	// Bytes is what the store keeps of the session's log: the lengths of
	// its kept events' encodings and of its tool calls'. (It does not
	// count the record, nor what the store's own structures add.) A
	// session stored by a gateway that did not count it is counted from
	// its next Append.
	Bytes int64
}

// Store is a state store. Implementations are safe for concurrent use.
type Store interface {
	// CreateSession stores a new session record.
	CreateSession(ctx context.Context, s *Session) error
	// GetSession returns the record of session id.
	GetSession(ctx context.Context, id string) (*Session, error)
	// ListSessions returns the records of owner's sessions (all sessions
	// when owner is empty), oldest first.
	ListSessions(ctx context.Context, owner string) ([]*Session, error)
	// SetState records a session's new state and why.
	SetState(ctx context.Context, id string, state State, detail string) error
	// SetAgentSession records the agent's ACP session id and protocol version.
	SetAgentSession(ctx context.Context, id, agentSessionID string, protocolVersion int) error
	// Append stores events, whose seqs must continue the session's log
	// without a gap, and the tool calls they changed, atomically. The
	// store keeps the events' and the calls' bytes as they are: it does
	// not encode anything again, nor modify them.
	Append(ctx context.Context, id string, events []*encoded.Event, changed []Call) error
	// Events returns up to limit (0: no limit) stored events with seq >
	// after, in order, made from the bytes the store kept (their messages
	// are decoded only when asked for). It fails with ErrTrimmed when
	// after is below the session's TrimmedSeq.
	Events(ctx context.Context, id string, after uint64, limit int) ([]*encoded.Event, error)
	// WaitEvents blocks until the session holds an event with seq > after,
	// and returns nil then; it returns ctx's error when ctx ends first, and
	// ErrNotFound when the session does not exist or is deleted. It sees
	// appends made through any Store open on the same data.
	WaitEvents(ctx context.Context, id string, after uint64) error
	// ToolCalls returns the session's merged tool calls in first-seen order,
	// and the seq of the last event they reflect.
	ToolCalls(ctx context.Context, id string) ([]*acpv2.ToolCall, uint64, error)
	// ToolCall returns the session's merged tool call callID (nil when the
	// session has none of that id) and the seq of the last event stored,
	// reading that call alone: its cost does not grow with the session's
	// other calls.
	ToolCall(ctx context.Context, id, callID string) (*acpv2.ToolCall, uint64, error)
	// DeleteSession removes a session with its events and tool calls.
	DeleteSession(ctx context.Context, id string) error
	// Close releases the store.
	Close() error
}

// Pinger is implemented by stores on the network: Ping says whether the
// store answers now, for the gateway's readiness (/readyz), and whether
// it still holds what it took: when it lost its data, Ping fails with
// ErrDataLost until AcceptLoss.
type Pinger interface {
	Ping(ctx context.Context) error
	// AcceptLoss makes the store trust the data it holds now, after a
	// loss Ping reported, once the caller let go of everything it held
	// from before.
	AcceptLoss(ctx context.Context) error
}

// Leaser is implemented by stores that several gateway replicas share. The
// replica that runs a session's agent holds the session's lease and renews
// it before ttl runs out; a replica that dies stops renewing, and its
// leases lapse.
type Leaser interface {
	// AcquireLease takes the lease on session id for holder, or extends it
	// when holder has it already. It fails with ErrLeaseHeld when another
	// holder's lease is live.
	AcquireLease(ctx context.Context, id, holder string, ttl time.Duration) error
	// ReleaseLease gives up holder's lease on id; it does nothing when
	// holder does not hold it.
	ReleaseLease(ctx context.Context, id, holder string) error
	// LeaseHolder returns the holder of id's live lease, or "" when none is.
	LeaseHolder(ctx context.Context, id string) (string, error)
}

// CheckSeqs verifies that events continue a log whose last seq is last,
// for stores to call before they append.
func CheckSeqs(last uint64, events []*encoded.Event) error {
	for i, e := range events {
		if want := last + uint64(i) + 1; e.Seq() != want {
			return fmt.Errorf("%w: got seq %d, want %d", ErrSeqConflict, e.Seq(), want)
		}
	}
	return nil
}

// Call is a merged tool call as Append takes it: its id and its protobuf
// encoding, which the store keeps as it is. A call changed by a merged
// call's event in the same Append takes its bytes from within the
// event's (encoded.Event.Field), so that the two share them.
type Call struct {
	ID    string
	Proto []byte
}

// CallOf returns tc as a Call, encoded by proto.Marshal; an error, one
// of ErrInvalid, says it does not encode.
func CallOf(tc *acpv2.ToolCall) (Call, error) {
	b, err := proto.Marshal(tc)
	if err != nil {
		return Call{}, fmt.Errorf("%w: encoding tool call %q: %w", ErrInvalid, tc.GetToolCallId(), err)
	}
	return Call{ID: tc.GetToolCallId(), Proto: b}, nil
}

// TrimmedError is the ErrTrimmed of a read after seq after from session id,
// whose events up to trimmed were dropped.
func TrimmedError(id string, trimmed, after uint64) error {
	return fmt.Errorf("%w: session %s keeps events after seq %d, asked after %d", ErrTrimmed, id, trimmed, after)
}
