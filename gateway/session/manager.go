// Package session runs the gateway's sessions: one agent per session, its
// numbered event log, its merged tool calls, the clients watching it, and the
// permission requests waiting on them.
package session

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/egress"
	"github.com/acp-gateway/acp-gateway/gateway/limits"
	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	"github.com/acp-gateway/acp-gateway/gateway/sandbox"
	"github.com/acp-gateway/acp-gateway/gateway/workspace"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Errors returned by the Manager and Session methods. The service layer maps
// each to a Connect code.
var (
	ErrNotFound        = errors.New("session not found")
	ErrUnknownAgent    = errors.New("unknown agent")
	ErrInvalid         = errors.New("invalid argument")
	ErrBusy            = errors.New("a turn is already running in this session")
	ErrNoTurn          = errors.New("no turn is running in this session")
	ErrClosed          = errors.New("session is closed")
	ErrAgentGone       = errors.New("the session's agent is gone")
	ErrAgentStart      = errors.New("the agent did not start")
	ErrCannotReattach  = errors.New("the session's agent ended and cannot be re-attached")
	ErrUnsupported     = errors.New("not supported by the session's agent")
	ErrAgentRefused    = errors.New("the agent refused the request")
	ErrAlreadyAnswered = errors.New("request already answered")
	ErrNoRequest       = errors.New("no such request")
	ErrLagging         = errors.New("watcher fell too far behind")
	ErrShutdown        = errors.New("gateway is shutting down")
	ErrMoved           = errors.New("the session moved to another gateway replica")
	ErrLimit           = errors.New("limit reached")
	ErrPermission      = errors.New("permission denied")
	// ErrStoreRecovering refuses to take over a session just after a
	// store outage, which its replica may be riding out.
	ErrStoreRecovering = errors.New("the store was out of reach moments ago, and the replica that runs this session may still hold it: retry in a few seconds")
)

// RemoteError is returned for a session whose agent runs on another gateway
// replica, which holds its lease: requests that need the agent go there.
type RemoteError struct {
	// Holder is the owning replica's advertised address.
	Holder string
}

func (e *RemoteError) Error() string { return "the session is served by the replica at " + e.Holder }

// Defaults for Options fields left zero.
const (
	DefaultPermissionTimeout = 10 * time.Minute
	DefaultCancelGrace       = 10 * time.Second
	DefaultWatchBuffer       = 65536
	DefaultWatchBufferBytes  = 16 << 20
	DefaultIdleTimeout       = 30 * time.Minute
)

// DefaultMaxStoreBytes is serve's default for Options.MaxStoreBytes.
const DefaultMaxStoreBytes = 1 << 30

// Defaults of the bounds on what one agent makes a session hold.
const (
	// DefaultMaxToolCalls is Options.MaxToolCalls when zero.
	DefaultMaxToolCalls = 10000
	// DefaultMaxPendingPermissions is Options.MaxPendingPermissions when
	// zero.
	DefaultMaxPendingPermissions = 64
	// SnapshotHeadroom is what a response holding a session's snapshot
	// takes besides its tool calls, at most: the session's id, agent,
	// cwd (a path, at most 4 KiB), state detail (cut to 4 KiB) and the
	// wrappers of GetSession's and Watch's responses. A session's tool
	// calls are kept within the response size less this.
	SnapshotHeadroom = 64 << 10
	// DefaultMaxToolCallBytes is Options.MaxToolCallBytes when zero: what
	// a default response (16 MiB) holds besides the SnapshotHeadroom.
	DefaultMaxToolCallBytes = 16<<20 - SnapshotHeadroom
)

// Options configure a Manager.
type Options struct {
	// Agents maps an agent name to its command line.
	Agents map[string][]string
	// AgentMCP maps an agent name to the MCP servers its sessions are
	// always given, before those their clients give.
	AgentMCP map[string][]agent.MCPServer
	// MCPAllow lists the MCP servers a client may give a session (see
	// CheckMCPAllow): stdio commands by absolute path, http and sse URLs
	// by prefix. Empty refuses every one.
	MCPAllow []string
	// Env is the environment agents run with.
	Env []string
	// Store holds sessions and their events.
	Store statestore.Store
	// Log receives structured logs.
	Log *slog.Logger
	// TurnTimeout, when positive, ends a turn that runs longer: the agent
	// gets session/cancel, and is stopped after CancelGrace if the turn
	// still runs; the turn ends cancelled, with cause turn_timeout.
	TurnTimeout time.Duration
	// CancelGrace is how long an agent has to end its turn after
	// session/cancel (Cancel, or TurnTimeout) before it is stopped.
	CancelGrace time.Duration
	// PermissionTimeout answers a permission request (or an elicitation)
	// left unanswered this long with cancelled.
	PermissionTimeout time.Duration
	// WatchBuffer and WatchBufferBytes bound how far a watcher may fall
	// behind the live events, in events and in their encoded bytes, before
	// it is cut off (it resumes from the store). A session's buffer grows
	// to them only while a watcher lags that far.
	WatchBuffer      int
	WatchBufferBytes int
	// IdleTimeout ends an agent that has had no turn and no watcher this
	// long. Negative disables it.
	IdleTimeout time.Duration
	// AgentStartTimeout bounds an agent's start-up.
	AgentStartTimeout time.Duration
	// AgentStopGrace is the pause between the steps of ending an agent.
	AgentStopGrace time.Duration
	// MaxAgentLine bounds one line of agent output.
	MaxAgentLine int
	// AgentStderrLines and AgentStderrBytes bound each agent's stderr in
	// the log, in lines and bytes a second (agent.Config.StderrLines and
	// StderrBytes: zero for the defaults, less than zero for none).
	AgentStderrLines, AgentStderrBytes int
	// MaxToolCalls caps a session's distinct tool calls: an update that
	// would add one more is refused as bad agent output (it is kept as an
	// unknown update and not merged). Zero means DefaultMaxToolCalls;
	// less than zero, no cap.
	MaxToolCalls int
	// MaxToolCallBytes caps the bytes of a session's merged tool calls,
	// as a snapshot encodes them (protobuf), so that GetSession and
	// Watch's snapshot always fit in one response: serve gives the
	// largest response less SnapshotHeadroom. Past it, the oldest
	// finished calls are trimmed to what identifies them (merge.ThinCall);
	// an update that would pass it with every finished call trimmed is
	// refused as bad agent output. Zero means DefaultMaxToolCallBytes;
	// less than zero, no cap.
	MaxToolCallBytes int
	// MaxPendingPermissions caps a session's permission requests and
	// elicitations waiting for an answer, counted together: the agent's
	// request past it is answered with an error. Zero means DefaultMaxPendingPermissions; less than zero, no
	// cap.
	MaxPendingPermissions int
	// MaxStoreBytes bounds what the store keeps of the sessions' logs
	// (statestore.Session.Bytes, summed over every session): while it
	// holds more, the closed sessions are deleted, those that closed
	// first first, but for the last one closed. Sessions that are not
	// closed are never deleted: each is bounded by the store's own
	// retention (statestore.Options.MaxEventBytes) and MaxToolCallBytes.
	// The bound is checked every minute, and when a session closes while
	// the last check found the store over it (or before the first check):
	// a close does not add to the store, it only lets a session be
	// deleted, so a close within the bound reads nothing. Zero sets none;
	// serve's default is DefaultMaxStoreBytes. (The cap on the number of
	// closed sessions is the store's: statestore.Options.MaxEndedSessions.)
	MaxStoreBytes int64
	// StoreOutageTimeout is how long a session's events wait, in its
	// queue, for a store that fails to take them before the session gives
	// up (writer.go); zero means DefaultStoreOutageTimeout.
	StoreOutageTimeout time.Duration
	// StoreBufferBytes bounds the encoded events a session holds that the
	// store has not taken: past it the agent's output is not read until
	// the store takes some. Zero means DefaultStoreBufferBytes.
	StoreBufferBytes int
	// Replica is this gateway's advertised address (a base URL other
	// replicas can call). It names the holder of the leases this gateway
	// takes when Store is shared (a statestore.Leaser).
	Replica string
	// LeaseTTL is how long a lease on a session lives unless renewed; a
	// replica that dies loses its sessions this long after. Renewal runs
	// every LeaseTTL/3.
	LeaseTTL time.Duration
	// MaxSessions caps the sessions this gateway runs at once; zero means
	// no cap.
	MaxSessions int
	// MaxSessionsPerUser caps one user's sessions that are not closed,
	// counted in the store, so across replicas sharing it; zero means no
	// cap.
	MaxSessionsPerUser int
	// Metrics records the sessions' metrics; nil means metrics nobody
	// reads. The store is instrumented with it too.
	Metrics *metrics.Metrics
	// Sandbox, when set, runs every agent in a sandbox of its own, its
	// session's workspace writable and Homes' directory of its user as
	// its HOME.
	Sandbox *sandbox.Sandbox
	// Homes holds each user's agent HOME, for the Sandbox.
	Homes *workspace.Root
	// Egress, with the Sandbox, gives each agent a network of its own
	// whose only way out is a proxy that applies this policy; nil leaves
	// sandboxed agents on the host's network.
	Egress *egress.Policy
	// EgressHelper is the executable that opens the proxy's socket in a
	// sandbox (the gateway's own, which calls egress.ListenIfCommanded).
	EgressHelper string
	// Limits, when set, bounds each agent's whole process tree.
	Limits *limits.Controller
	// AgentNice is how much lower than the gateway's the CPU priority of
	// each agent's process tree is (agent.Config.Nice): zero means
	// agent.DefaultNice, less than zero none (the gateway's own).
	AgentNice int
	// Workspaces, when set, holds each user's directory: a session
	// created with an empty cwd works in a new directory of its own
	// there, USER_DIR/SESSION_ID. Without it an empty cwd is refused.
	Workspaces *workspace.Root
	// ConfineCwd makes a client's cwd resolve, symlinks and all, to its
	// user's directory of Workspaces or a directory inside it; any other
	// cwd fails with ErrPermission, the same whether or not it exists, and
	// the session keeps the resolved path. With Workspaces nil every cwd
	// is refused. Without ConfineCwd any existing directory will do.
	ConfineCwd bool
	// AdoptAgentSessions lets users list the sessions an agent keeps
	// (ACP session/list) in their workspace and adopt one as a new
	// session (adopt.go). Off, both are ErrAdoptionOff.
	AdoptAgentSessions bool
	// Clock runs the idle timer (IdleTimeout), the permission requests'
	// timers (PermissionTimeout), the turn's (TurnTimeout, CancelGrace),
	// and the leases' times: the upkeep's renewals (every LeaseTTL/3),
	// the fences, and the steady-store rule; nil is the real clock. A test
	// whose agent is a real process, which a testing/synctest bubble
	// cannot hold, gives a clockwork.FakeClock and advances it past the
	// timeout.
	Clock clockwork.Clock
}

// orDefault is a cap's value: def for zero, and for less than zero none
// (zero, which the checks read as none).
func orDefault(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// DefaultLeaseTTL is the lease TTL when Options.LeaseTTL is zero.
const DefaultLeaseTTL = 10 * time.Second

// Manager owns the sessions of one gateway process.
type Manager struct {
	opts Options

	// leaser is the store's lease API when the store is shared, else nil.
	leaser statestore.Leaser
	// pinger asks a store on the network whether it lost its data; nil
	// for a local one.
	pinger statestore.Pinger
	// writers counts the sessions' store writers (writer.go), which
	// writersMu and writersClosed stop from starting once Close waits for
	// them; checking serialises checkStore.
	writers       sync.WaitGroup
	writersMu     sync.Mutex
	writersClosed bool
	checking      sync.Mutex
	// storeFailedAt is when a store call of the lease upkeep or of a
	// takeover last failed (monoNow; 0: never).
	storeFailedAt atomic.Int64
	// clockBase is the origin of the fences' times (monoNow).
	clockBase time.Time
	// lost holds the sessions let go because the store lost their data
	// (m.mu).
	lost map[string]lostSession

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool
	wg       sync.WaitGroup
	stop     chan struct{}
	stopOnce sync.Once
	// restoring serialises restoring sessions from the store, and the
	// orphan sweep with them.
	restoring sync.Mutex
	// creating serialises the limit checks of Create with the records
	// they count.
	creating sync.Mutex
	upkeep   sync.WaitGroup
	// pruning serialises pruneEnded; overWarned is when it last warned
	// that the sessions not closed hold more than MaxStoreBytes.
	pruning    sync.Mutex
	overWarned time.Time
	// storeWithin says that the last pruneEnded left the store within
	// MaxStoreBytes: a close then has no reason to check again.
	storeWithin atomic.Bool
	// profiles holds the agents' answers to initialize (agents.go).
	profiles profiles
	// listers lets each user's agent list their sessions one at a time
	// (adopt.go).
	listers listers
}

// NewManager returns a Manager.
func NewManager(opts Options) *Manager {
	if opts.CancelGrace <= 0 {
		opts.CancelGrace = DefaultCancelGrace
	}
	if opts.PermissionTimeout <= 0 {
		opts.PermissionTimeout = DefaultPermissionTimeout
	}
	if opts.WatchBuffer <= 0 {
		opts.WatchBuffer = DefaultWatchBuffer
	}
	if opts.WatchBufferBytes <= 0 {
		opts.WatchBufferBytes = DefaultWatchBufferBytes
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Store == nil {
		opts.Store = statestore.NewMemory(statestore.Options{})
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.StoreOutageTimeout <= 0 {
		opts.StoreOutageTimeout = DefaultStoreOutageTimeout
	}
	if opts.StoreBufferBytes <= 0 {
		opts.StoreBufferBytes = DefaultStoreBufferBytes
	}
	opts.MaxToolCalls = orDefault(opts.MaxToolCalls, DefaultMaxToolCalls)
	opts.MaxToolCallBytes = orDefault(opts.MaxToolCallBytes, DefaultMaxToolCallBytes)
	opts.MaxPendingPermissions = orDefault(opts.MaxPendingPermissions, DefaultMaxPendingPermissions)
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(metrics.Options{MaxSessionSeries: -1})
	}
	pinger, _ := opts.Store.(statestore.Pinger)
	opts.Store = opts.Metrics.InstrumentStore(opts.Store)
	m := &Manager{opts: opts, pinger: pinger, sessions: map[string]*Session{}, stop: make(chan struct{}), clockBase: opts.Clock.Now()}
	if opts.MaxStoreBytes > 0 {
		m.upkeep.Add(1)
		go m.every(storePruneInterval, m.pruneEnded)
	}
	if l, ok := opts.Store.(statestore.Leaser); ok {
		if opts.Replica == "" {
			opts.Replica = "replica-" + newID()
			m.opts.Replica = opts.Replica
		}
		m.leaser = l
		m.upkeep.Add(1)
		go m.every(opts.LeaseTTL/3, m.keepLeases)
	}
	return m
}

// AgentNames lists the configured agents, sorted.
func (m *Manager) AgentNames() []string {
	names := make([]string, 0, len(m.opts.Agents))
	for n := range m.opts.Agents {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "s_" + hex.EncodeToString(b[:])
}

// Create starts agentName in cwd for a new session owned by user. When the
// agent demands authentication, authMethod names the method to run. An
// empty cwd gives the session a new directory of its own (see
// Options.Workspaces); a cwd the workspace policy refuses is ErrPermission.
// The agent is given the MCP servers configured for it and mcp, which
// Options.MCPAllow must allow (else ErrInvalid).
func (m *Manager) Create(ctx context.Context, user, agentName, cwd, authMethod string, mcp ...agent.MCPServer) (*Session, error) {
	return m.create(ctx, user, agentName, cwd, authMethod, "", mcp)
}

// create is Create, or with adoptID Adopt.
func (m *Manager) create(ctx context.Context, user, agentName, cwd, authMethod, adoptID string, mcp []agent.MCPServer) (*Session, error) {
	command, ok := m.opts.Agents[agentName]
	if !ok {
		return nil, fmt.Errorf("%w %q (configured: %v)", ErrUnknownAgent, agentName, m.AgentNames())
	}
	if err := checkMCP(m.opts.MCPAllow, m.opts.AgentMCP[agentName], mcp); err != nil {
		return nil, err
	}
	id := newID()
	var dir string
	var fresh bool
	var err error
	if adoptID != "" {
		dir, err = m.adoptedCwd(ctx, user, agentName, adoptID, cwd)
	} else {
		dir, fresh, err = m.workdir(user, id, cwd)
	}
	if err != nil {
		return nil, err
	}
	// A directory made for a session that does not come to be goes with it.
	undo := func() {
		if fresh {
			if err := os.RemoveAll(dir); err != nil {
				m.opts.Log.Warn("removing the workspace of a session that failed to start", "session", id, "error", err)
			}
		}
	}
	m.creating.Lock()
	var rec *statestore.Session
	release, err := m.claim(ctx, agentName, adoptID)
	if err == nil {
		rec, err = m.reserve(ctx, id, user, agentName, dir, adoptID, encodeMCP(mcp))
		release()
	}
	m.creating.Unlock()
	if err != nil {
		undo()
		return nil, err
	}
	leased := m.opts.Clock.Now()
	if m.leaser != nil {
		if err := m.leaser.AcquireLease(ctx, rec.ID, m.opts.Replica, m.opts.LeaseTTL); err != nil {
			m.discard(rec.ID)
			undo()
			return nil, err
		}
	}
	s := newSession(m, rec, command)
	if m.leaser != nil {
		s.leaseHeld(leased)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		s.stopFence()
		m.discard(rec.ID)
		undo()
		return nil, ErrShutdown
	}
	m.registerLocked(s)
	m.mu.Unlock()
	mode := attachNew
	if adoptID != "" {
		mode = attachAdopt
		s.mu.Lock()
		s.agentSessionID = adoptID
		s.mu.Unlock()
	}
	if err := s.attach(ctx, authMethod, mode); err != nil {
		m.unregister(s)
		m.discard(rec.ID)
		undo()
		return nil, err
	}
	s.met.Created()
	return s, nil
}

// workdir returns the directory session id of user works in, for the cwd
// the client gave: that cwd checked (resolved, when confined), or for an
// empty one a new directory, which fresh reports.
func (m *Manager) workdir(user, id, cwd string) (dir string, fresh bool, err error) {
	ws := m.opts.Workspaces
	switch {
	case cwd == "" && ws == nil:
		return "", false, fmt.Errorf("%w: cwd is empty, and this gateway makes no workspaces; give an absolute path", ErrInvalid)
	case cwd == "":
		dir, err := ws.Fresh(user, id)
		if err != nil {
			return "", false, err // the gateway's fault: an internal error
		}
		return dir, true, nil
	case !filepath.IsAbs(cwd):
		return "", false, fmt.Errorf("%w: cwd %q is not an absolute path", ErrInvalid, cwd)
	}
	dir, err = m.checkCwd(user, cwd)
	return dir, false, err
}

// checkCwd checks an absolute cwd for user's session, and returns the
// directory the session keeps: where cwd is confined, cwd resolved, which
// must be in user's directory (else ErrPermission, the same whether or not
// it exists); otherwise any existing directory (else ErrInvalid).
func (m *Manager) checkCwd(user, cwd string) (string, error) {
	ws := m.opts.Workspaces
	switch {
	case !filepath.IsAbs(cwd):
		return "", fmt.Errorf("%w: cwd %q is not an absolute path", ErrInvalid, cwd)
	case m.opts.ConfineCwd && ws == nil:
		return "", fmt.Errorf("%w: %w: this gateway has none for you", ErrPermission, workspace.ErrOutside)
	case m.opts.ConfineCwd:
		dir, err := ws.Resolve(user, cwd)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrPermission, err)
		}
		return dir, nil
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: cwd %q is not a directory on the gateway", ErrInvalid, cwd)
	}
	return filepath.Clean(cwd), nil
}

// reserve checks the limits and records a new session id, starting, in
// cwd, with the MCP servers its client gave, and the agent's session id
// when it adopts one ("" for a new one). m.creating must be held.
func (m *Manager) reserve(ctx context.Context, id, user, agentName, cwd, agentSID string, mcp []byte) (*statestore.Session, error) {
	m.mu.Lock()
	closed, running := m.closed, len(m.sessions)
	m.mu.Unlock()
	if closed {
		return nil, ErrShutdown
	}
	if limit := m.opts.MaxSessions; limit > 0 && running >= limit {
		return nil, fmt.Errorf("%w: this gateway runs %d sessions, its limit; retry later or on another replica", ErrLimit, running)
	}
	if limit := m.opts.MaxSessionsPerUser; limit > 0 {
		recs, err := m.opts.Store.ListSessions(ctx, user)
		if err != nil {
			return nil, err
		}
		open := 0
		for _, r := range recs {
			if r.State != statestore.StateClosed {
				open++
			}
		}
		if open >= limit {
			return nil, fmt.Errorf("%w: you have %d open sessions, the limit per user; close one first", ErrLimit, open)
		}
	}
	rec := &statestore.Session{
		ID: id, Owner: user, Agent: agentName, Cwd: cwd, MCPServers: mcp, AgentSessionID: agentSID,
		State: statestore.StateStarting, CreatedAt: time.Now().UTC(),
	}
	if err := m.opts.Store.CreateSession(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// discard deletes a session whose creation failed: the client never got
// its id.
func (m *Manager) discard(id string) {
	ctx, cancel := m.storeContext()
	defer cancel()
	if err := m.opts.Store.DeleteSession(ctx, id); err != nil {
		m.opts.Log.Warn("store: deleting a session that failed to start", "session", id, "error", err)
	}
	if m.leaser != nil {
		if err := m.leaser.ReleaseLease(ctx, id, m.opts.Replica); err != nil {
			m.opts.Log.Warn("store: releasing a lease", "session", id, "error", err)
		}
	}
}

// Get returns user's session id, to act on its agent. Another user's
// session is not found. A session this gateway does not run yet (after a
// restart, or whose replica died) is taken over, with its agent lost until
// a prompt re-attaches it; one that another live replica runs is a
// *RemoteError naming that replica.
func (m *Manager) Get(ctx context.Context, user, id string) (*Session, error) {
	if s := m.local(id); s != nil {
		return owned(s, user)
	}
	// One restore at a time, so two requests cannot both mark the same
	// session lost (the second would fail on its seq).
	m.restoring.Lock()
	defer m.restoring.Unlock()
	if s := m.local(id); s != nil {
		return owned(s, user) // restored meanwhile
	}
	rec, err := m.record(ctx, user, id)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrDataLost) {
			m.storeFailed()
		}
		return nil, err
	}
	if m.leaser != nil && rec.State != statestore.StateClosed && !m.storeSteady() {
		// The store failed within a lease TTL: a lapsed lease says nothing
		// of its holder, which may be riding the outage out and renews it
		// first. A live one is forwarded to; none is taken meanwhile (even
		// for a moment, which would make the holder step aside). Any
		// session not closed: its stored state may lag.
		if holder, herr := m.leaser.LeaseHolder(ctx, id); herr == nil && holder != "" && holder != m.opts.Replica {
			return nil, &RemoteError{Holder: holder}
		}
		return nil, ErrStoreRecovering
	}
	leased := m.opts.Clock.Now()
	if m.leaser != nil {
		err := m.leaser.AcquireLease(ctx, id, m.opts.Replica, m.opts.LeaseTTL)
		if errors.Is(err, statestore.ErrLeaseHeld) {
			holder, herr := m.leaser.LeaseHolder(ctx, id)
			if herr == nil && holder != "" {
				return nil, &RemoteError{Holder: holder}
			}
		}
		if err != nil {
			return nil, err
		}
		// Holding the lease, read what the last owner left.
		if rec, err = m.opts.Store.GetSession(ctx, id); err != nil {
			return nil, err
		}
	}
	s, err := m.restore(ctx, rec)
	if err != nil {
		return nil, err
	}
	if rec.State == statestore.StateClosed {
		// Nothing will run here: answer from it without keeping it.
		if m.leaser != nil {
			if err := m.leaser.ReleaseLease(ctx, id, m.opts.Replica); err != nil {
				m.opts.Log.Warn("store: releasing a lease", "session", id, "error", err)
			}
		}
		return s, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrShutdown
	}
	if m.leaser != nil {
		s.leaseHeld(leased)
	}
	m.registerLocked(s)
	return s, nil
}

// registerLocked adds s to the sessions this gateway runs, and starts its
// metrics. m.mu must be held.
func (m *Manager) registerLocked(s *Session) {
	m.sessions[s.rec.ID] = s
	s.met = m.opts.Metrics.StartSession(s.rec.ID, s.rec.Agent, false)
	s.mu.Lock()
	// The calls of a restored session count by status; those that finished
	// were counted finished by the run that saw them finish, and the others
	// are timed from here.
	for _, tc := range s.tools.Snapshot() {
		if st := toolStatus(tc); finished(st) {
			s.met.ToolStatus("", st)
		} else {
			s.trackToolLocked("", tc)
		}
	}
	// A restored session is idle: its calls wait in wire form, encoded
	// once they have been counted from the decoded ones.
	s.tools.Compact()
	s.mu.Unlock()
}

// unregister removes s from the sessions this gateway runs, if it is
// there, and ends its metrics.
func (m *Manager) unregister(s *Session) {
	m.mu.Lock()
	if m.sessions[s.rec.ID] == s {
		delete(m.sessions, s.rec.ID)
	}
	m.mu.Unlock()
	s.stopFence()
	s.met.End()
}

// owned returns s when user owns it; another user's session is not found.
func owned(s *Session, user string) (*Session, error) {
	if s.rec.Owner != user {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, s.rec.ID)
	}
	return s, nil
}

// local returns the session if this gateway runs it.
func (m *Manager) local(id string) *Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions[id]
}

// record returns the stored record of user's session id.
func (m *Manager) record(ctx context.Context, user, id string) (*statestore.Session, error) {
	if lost := m.lostErr(user, id); lost != nil {
		// Whatever the store holds of it now: its log went back, or is
		// gone.
		return nil, lost
	}
	rec, err := m.opts.Store.GetSession(ctx, id)
	if errors.Is(err, statestore.ErrNotFound) || (err == nil && rec.Owner != user) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return rec, err
}

// List returns the records of user's sessions.
func (m *Manager) List(ctx context.Context, user string) ([]*statestore.Session, error) {
	return m.opts.Store.ListSessions(ctx, user)
}

// running returns the sessions this gateway runs now.
func (m *Manager) running() []*Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.sessions))
}

// Close ends every session's agent. Sessions stay readable.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	all := m.running()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.shutdown()
		}()
	}
	wg.Wait()
	m.wg.Wait()
	// What is queued is stored (or given up on); no writer starts after.
	m.writersMu.Lock()
	m.writersClosed = true
	m.writersMu.Unlock()
	m.writers.Wait()
	m.stopOnce.Do(func() { close(m.stop) })
	m.upkeep.Wait()
	if m.leaser != nil {
		// Hand the sessions over at once rather than when the leases lapse.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range all {
			if err := m.leaser.ReleaseLease(ctx, s.rec.ID, m.opts.Replica); err != nil {
				m.opts.Log.Warn("store: releasing a lease", "session", s.rec.ID, "error", err)
			}
		}
	}
}

// agentConfig is the configuration of the agent of s: confined by the
// Sandbox and under the Limits, where they are set. On error, what it
// opened for the agent is closed.
func (m *Manager) agentConfig(s *Session) (agent.Config, error) {
	in, out := s.met.AgentIO()
	cfg := agent.Config{
		Command:      s.command,
		Dir:          s.rec.Cwd,
		Env:          m.opts.Env,
		Client:       s,
		Log:          s.log,
		StartTimeout: m.opts.AgentStartTimeout,
		StopGrace:    m.opts.AgentStopGrace,
		MaxLine:      m.opts.MaxAgentLine,
		StderrLines:  m.opts.AgentStderrLines,
		StderrBytes:  m.opts.AgentStderrBytes,
		Fence:        s.fenceAgent,
		BytesIn:      in,
		BytesOut:     out,
	}
	mcp, err := m.mcpServers(s)
	if err != nil {
		return cfg, err
	}
	cfg.MCPServers = mcp
	ws, err := m.openWorkspace(s)
	if err != nil {
		return cfg, err
	}
	cfg.Workspace = ws
	cfg.Closers = append(cfg.Closers, ws)
	home := func() (string, error) { return m.agentHome(s.rec.Owner) }
	// A name of its own for every agent the session starts.
	return m.confine(cfg, home, s.rec.ID+"-"+newID()[2:10])
}

// agentHome returns user's agent HOME in the Sandbox.
func (m *Manager) agentHome(user string) (string, error) {
	if m.opts.Homes == nil {
		return "", errors.New("the sandbox needs a directory for the users' homes")
	}
	home, err := m.opts.Homes.UserDir(user)
	if err != nil {
		return "", fmt.Errorf("the agent's home: %w", err)
	}
	return home, nil
}

// confine puts the agent of cfg, which works in cfg.Dir (opened as
// cfg.Workspace), in the Sandbox with the HOME that home returns, and
// under the Limits in a group of that name, where they are set, at
// AgentNice's lower CPU priority. On error,
// cfg.Closers are closed.
func (m *Manager) confine(cfg agent.Config, home func() (string, error), group string) (_ agent.Config, err error) {
	defer func() {
		if err != nil {
			closeAll(cfg.Closers)
		}
	}()
	if m.opts.Sandbox != nil {
		home, err := home()
		if err != nil {
			return cfg, err
		}
		spec := sandbox.Spec{Command: cfg.Command, Workspace: cfg.Dir, WorkspaceFD: agent.WorkspaceFD, Home: home, Env: m.opts.Env}
		if m.opts.Egress != nil {
			h, err := egress.NewHandoff()
			if err != nil {
				return cfg, fmt.Errorf("the agent's egress proxy: %w", err)
			}
			spec.Egress = &sandbox.Egress{Helper: m.opts.EgressHelper, HandoffDir: h.Dir(),
				ListenCommand: egress.ListenCommand, Socket: egress.HandoffSocket, Env: egress.Env()}
			wait := cmp.Or(m.opts.AgentStartTimeout, agent.DefaultStartTimeout)
			cfg.Closers = append(cfg.Closers, m.opts.Egress.ServeAgent(h, wait, cfg.Log))
		}
		cfg.Command, cfg.Env, err = m.opts.Sandbox.Command(spec)
		if err != nil {
			return cfg, err
		}
	}
	cfg.Nice = m.opts.AgentNice
	if cfg.Nice == 0 {
		cfg.Nice = agent.DefaultNice
	}
	if m.opts.Limits != nil {
		g, err := m.opts.Limits.New(group)
		if err != nil {
			return cfg, fmt.Errorf("the agent's limits: %w", err)
		}
		cfg.Group = g
	}
	return cfg, nil
}

// openWorkspace opens the session's working directory for its agent:
// where cwd is confined, from its user's directory with no symbolic link
// followed, so that a link an agent swapped in for a part of the path
// since it was checked cannot lead it into another user's directory or
// the host's.
func (m *Manager) openWorkspace(s *Session) (*os.File, error) {
	if m.opts.ConfineCwd && m.opts.Workspaces != nil {
		f, err := m.opts.Workspaces.Open(s.rec.Owner, s.rec.Cwd)
		if err != nil {
			return nil, fmt.Errorf("%w: the session's working directory: %w", ErrPermission, err)
		}
		return f, nil
	}
	f, err := workspace.OpenDir(s.rec.Cwd)
	if err != nil {
		return nil, fmt.Errorf("%w: the session's working directory %s: %v", ErrAgentGone, s.rec.Cwd, errors.Unwrap(err))
	}
	return f, nil
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// AgentOf names the agent of session id when this gateway runs it, else "".
func (m *Manager) AgentOf(id string) string {
	if s := m.local(id); s != nil {
		return s.rec.Agent
	}
	return ""
}
