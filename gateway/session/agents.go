package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// AgentProfile is a configured agent and what it said of itself at
// initialize.
type AgentProfile struct {
	// Name is the agent's configured name.
	Name string
	// Profile is empty when Err is set.
	Profile agent.Profile
	// Err says that the agent could not be asked, in words safe to show
	// a client (the log says why).
	Err error
}

// ErrAgentDidNotStart is AgentProfile.Err of an agent that did not start
// or did not answer initialize.
var ErrAgentDidNotStart = errors.New("the agent did not start or did not answer initialize; the gateway's log says why")

// probeRetry is how long an agent's failed answer to initialize is given
// to ListAgents' callers before it is asked again.
var probeRetry = time.Minute

// profiles holds the agents' answers to initialize, asked once each.
type profiles struct {
	mu     sync.Mutex
	byName map[string]*profileCall
}

// profileCall is an agent's answer, or the asking of it while done is
// open.
type profileCall struct {
	done    chan struct{}
	profile agent.Profile
	err     error
}

// Agents lists the agents user may start (every configured agent: the
// gateway has no per-user list), sorted by name, with what each said of
// itself at initialize. An agent not asked yet is started to ask it, the
// agents at once, as a session's agent is started (sandboxed and under
// the limits) but in an empty directory of its own with an empty HOME,
// so that the answer, which is kept and shown to every user, holds
// nothing of any user's; it is stopped once it answered. An agent that
// failed is asked again once probeRetry has passed.
func (m *Manager) Agents(ctx context.Context, user string) ([]AgentProfile, error) {
	_ = user // every user may start every agent
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, ErrShutdown
	}
	names := m.AgentNames()
	out := make([]AgentProfile, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			p, err := m.profile(ctx, name)
			out[i] = AgentProfile{Name: name, Profile: p, Err: err}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// profile returns agent name's answer to initialize, asking it first when
// nobody has, or waiting for the probe under way. The probe runs apart
// from the caller, which may stop waiting (ctx) without failing it.
func (m *Manager) profile(ctx context.Context, name string) (agent.Profile, error) {
	// Close waits for a probe: it counts in m.wg, taken before c.mu.
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return agent.Profile{}, ErrShutdown
	}
	m.wg.Add(1)
	m.mu.Unlock()
	c := &m.profiles
	c.mu.Lock()
	call := c.byName[name]
	if call != nil {
		m.wg.Done() // asked already: no probe starts
	} else {
		if c.byName == nil {
			c.byName = map[string]*profileCall{}
		}
		call = &profileCall{done: make(chan struct{})}
		c.byName[name] = call
		// The probe is every waiting caller's, not this one's: a caller
		// that goes away fails none of the others (its values, the trace
		// context, are kept). The agent's start timeout bounds it.
		go func() {
			defer m.wg.Done()
			call.profile, call.err = m.probe(context.WithoutCancel(ctx), name)
			if call.err != nil {
				// Asked again once probeRetry has passed, not at every
				// call: any client could otherwise keep agents starting.
				time.AfterFunc(probeRetry, func() {
					c.mu.Lock()
					if c.byName[name] == call {
						delete(c.byName, name)
					}
					c.mu.Unlock()
				})
			}
			close(call.done)
		}()
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.profile, call.err
	case <-ctx.Done():
		return agent.Profile{}, ctx.Err()
	}
}

// probe starts agent name to read its answer to initialize, and stops it.
func (m *Manager) probe(ctx context.Context, name string) (agent.Profile, error) {
	log := m.opts.Log.With("agent", name, "probe", true)
	p, err := m.runProbe(ctx, name, log)
	if err != nil {
		log.Warn("asking an agent what it offers (ListAgents) failed", "error", err)
		return agent.Profile{}, ErrAgentDidNotStart
	}
	return p, nil
}

func (m *Manager) runProbe(ctx context.Context, name string, log *slog.Logger) (agent.Profile, error) {
	dir, err := os.MkdirTemp("", "acp-gateway-probe-")
	if err != nil {
		return agent.Profile{}, err
	}
	defer os.RemoveAll(dir)
	work, home := filepath.Join(dir, "work"), filepath.Join(dir, "home")
	for _, d := range []string{work, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return agent.Profile{}, err
		}
	}
	ws, err := openDir(work)
	if err != nil {
		return agent.Profile{}, fmt.Errorf("the probe's directory: %w", err)
	}
	env := m.opts.Env
	if m.opts.Sandbox == nil {
		// The sandbox gives the agent home as its HOME; without it, the
		// HOME every session's agent shares is replaced here.
		env = append(slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
			return strings.HasPrefix(kv, "HOME=")
		}), "HOME="+home)
	}
	a, err := m.startHelper(ctx, name, ws, env, func() (string, error) { return home, nil }, "probe", log)
	if err != nil {
		return agent.Profile{}, err
	}
	p := a.Profile()
	a.Close()
	log.Info("asked the agent what it offers")
	return p, nil
}

// startHelper starts agent name for the gateway's own questions, with
// no session: in the directory ws (which it closes), with env, confined
// as a session's agent is but with the HOME that home returns (for the
// Sandbox), in a group named after what. Whatever the agent sends of its
// own is dropped (probeClient). closers are closed with ws.
func (m *Manager) startHelper(ctx context.Context, name string, ws *os.File, env []string, home func() (string, error), what string, log *slog.Logger, closers ...io.Closer) (*agent.Agent, error) {
	cfg := agent.Config{
		Command:      m.opts.Agents[name],
		Dir:          ws.Name(),
		Env:          env,
		Client:       probeClient{},
		Log:          log,
		StartTimeout: m.opts.AgentStartTimeout,
		StopGrace:    m.opts.AgentStopGrace,
		MaxLine:      m.opts.MaxAgentLine,
		StderrLines:  m.opts.AgentStderrLines,
		StderrBytes:  m.opts.AgentStderrBytes,
		Workspace:    ws,
		Closers:      append([]io.Closer{ws}, closers...),
	}
	cfg, err := m.confine(cfg, home, what+"-"+newID()[2:10])
	if err != nil {
		return nil, err
	}
	return agent.Start(ctx, cfg)
}

// probeClient is the Client of an agent started only to be initialized:
// it has no session, so nothing should come, and what comes is dropped.
type probeClient struct{}

func (probeClient) SessionUpdates([]agent.Update) {}

func (probeClient) RequestPermission(json.RawMessage) (<-chan *acpv2.PermissionOutcome, func(), error) {
	return nil, nil, errors.New("no session")
}

func (probeClient) Elicit(json.RawMessage) (<-chan *acpv2.ElicitationResolved, func(), error) {
	return nil, nil, errors.New("no session")
}

func (probeClient) ElicitationComplete(json.RawMessage) {}
