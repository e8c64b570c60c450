// Package session runs the gateway's sessions: one agent per session, its
// numbered event log, its merged tool calls, the clients watching it, and the
// permission requests waiting on them.
package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
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
	ErrCannotReattach  = errors.New("the session's agent ended and cannot be re-attached")
	ErrUnsupported     = errors.New("not supported by the session's agent")
	ErrAgentRefused    = errors.New("the agent refused the request")
	ErrAlreadyAnswered = errors.New("permission request already answered")
	ErrNoRequest       = errors.New("no such permission request")
	ErrLagging         = errors.New("watcher fell too far behind")
	ErrShutdown        = errors.New("gateway is shutting down")
)

// Defaults for Options fields left zero.
const (
	DefaultPermissionTimeout = 10 * time.Minute
	DefaultWatchBuffer       = 1024
	DefaultIdleTimeout       = 30 * time.Minute
)

// Options configure a Manager.
type Options struct {
	// Agents maps an agent name to its command line.
	Agents map[string][]string
	// Env is the environment agents run with.
	Env []string
	// Store holds sessions and their events.
	Store statestore.Store
	// Log receives structured logs.
	Log *slog.Logger
	// PermissionTimeout answers a permission request left unanswered this
	// long with cancelled.
	PermissionTimeout time.Duration
	// WatchBuffer is how many live events a watcher may fall behind before
	// it is cut off.
	WatchBuffer int
	// IdleTimeout ends an agent that has had no turn and no watcher this
	// long. Negative disables it.
	IdleTimeout time.Duration
	// AgentStartTimeout bounds an agent's start-up.
	AgentStartTimeout time.Duration
	// AgentStopGrace is the pause between the steps of ending an agent.
	AgentStopGrace time.Duration
	// MaxAgentLine bounds one line of agent output.
	MaxAgentLine int
}

// Manager owns the sessions of one gateway process.
type Manager struct {
	opts Options

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool
	wg       sync.WaitGroup
}

// NewManager returns a Manager.
func NewManager(opts Options) *Manager {
	if opts.PermissionTimeout <= 0 {
		opts.PermissionTimeout = DefaultPermissionTimeout
	}
	if opts.WatchBuffer <= 0 {
		opts.WatchBuffer = DefaultWatchBuffer
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Store == nil {
		opts.Store = statestore.NewMemory(statestore.Options{})
	}
	return &Manager{opts: opts, sessions: map[string]*Session{}}
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
// agent demands authentication, authMethod names the method to run.
func (m *Manager) Create(ctx context.Context, user, agentName, cwd, authMethod string) (*Session, error) {
	command, ok := m.opts.Agents[agentName]
	if !ok {
		return nil, fmt.Errorf("%w %q (configured: %v)", ErrUnknownAgent, agentName, m.AgentNames())
	}
	if !filepath.IsAbs(cwd) {
		return nil, fmt.Errorf("%w: cwd %q is not an absolute path", ErrInvalid, cwd)
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: cwd %q is not a directory on the gateway", ErrInvalid, cwd)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrShutdown
	}
	m.mu.Unlock()

	rec := &statestore.Session{
		ID: newID(), Owner: user, Agent: agentName, Cwd: filepath.Clean(cwd),
		State: statestore.StateStarting, CreatedAt: time.Now().UTC(),
	}
	if err := m.opts.Store.CreateSession(ctx, rec); err != nil {
		return nil, err
	}
	s := newSession(m, rec, command)
	m.mu.Lock()
	m.sessions[rec.ID] = s
	m.mu.Unlock()
	if err := s.attach(ctx, authMethod, false); err != nil {
		return nil, err
	}
	return s, nil
}

// Get returns user's session id. Another user's session is not found.
func (m *Manager) Get(ctx context.Context, user, id string) (*Session, error) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	m.mu.Unlock()
	if !ok || s.rec.Owner != user {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return s, nil
}

// List returns the records of user's sessions.
func (m *Manager) List(ctx context.Context, user string) ([]*statestore.Session, error) {
	return m.opts.Store.ListSessions(ctx, user)
}

// Close ends every session's agent. Sessions stay readable.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	var all []*Session
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
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
}

func (m *Manager) agentConfig(s *Session) agent.Config {
	return agent.Config{
		Command:      s.command,
		Dir:          s.rec.Cwd,
		Env:          m.opts.Env,
		Client:       s,
		Log:          s.log,
		StartTimeout: m.opts.AgentStartTimeout,
		StopGrace:    m.opts.AgentStopGrace,
		MaxLine:      m.opts.MaxAgentLine,
	}
}
