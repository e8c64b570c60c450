package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/acp-gateway/acp-gateway/internal/textcut"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/workspace"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// Adoption of an agent's own sessions (Options.AdoptAgentSessions): the
// sessions an agent keeps (ACP session/list) that lie in the caller's
// workspace are listed, and one of them is taken up as a new gateway
// session, the history the agent replays recorded as its first events.

var (
	// ErrAdoptionOff refuses to list or adopt an agent's sessions where
	// the operator did not turn it on.
	ErrAdoptionOff = errors.New("adopting an agent's own sessions is off on this gateway (serve --adopt-agent-sessions turns it on)")
	// ErrAdopted refuses to adopt an agent session that a gateway session
	// not closed holds already (one that adopted it, or made it).
	ErrAdopted = errors.New("the agent's session is held by a gateway session that is not closed; close that one first")
)

// Bounds on what one listing of an agent's sessions reads.
const (
	// maxListPages is how many session/list pages are asked for at most.
	maxListPages = 32
	// maxAgentSessions is how many sessions a listing keeps at most.
	maxAgentSessions = 1000
	// maxAgentSessionID is the longest agent session id listed: longer
	// ones could not be given back to CreateSession.
	maxAgentSessionID = 256
	// maxAgentSessionTitle is how much of a title is kept, in bytes.
	maxAgentSessionTitle = 256
)

// AgentSession is one of an agent's own sessions, as session/list told it,
// that the caller may adopt.
type AgentSession struct {
	// ID is the agent's session id.
	ID string
	// Cwd is the session's working directory, as a gateway session that
	// adopts it keeps it (resolved, where cwds are confined).
	Cwd string
	// Title is the agent's, cut to maxAgentSessionTitle bytes; "" when
	// it gave none.
	Title string
	// UpdatedAt is the time of the session's last activity; zero when
	// the agent gave none or one that does not parse.
	UpdatedAt time.Time
}

// AgentSessions lists the sessions agentName keeps whose working
// directory user may use (the cwd rule of Create): asked with
// session/list, page after page, of an agent started for the question in
// user's directory with the HOME a session's agent of user's has, and
// stopped after. truncated says that the list stopped at its bounds
// (maxListPages pages, maxAgentSessions sessions). Without
// Options.AdoptAgentSessions it is ErrAdoptionOff.
func (m *Manager) AgentSessions(ctx context.Context, user, agentName string) (list []AgentSession, truncated bool, err error) {
	if err := m.adoptable(agentName); err != nil {
		return nil, false, err
	}
	truncated, err = m.walkAgentSessions(ctx, user, agentName, func(as AgentSession) bool {
		list = append(list, as)
		return len(list) < maxAgentSessions
	})
	return list, truncated, err
}

// Adopt is Create for agentName's own session agentSessionID, which
// AgentSessions lists for user (else ErrNotFound, whether the agent does
// not have it or it lies outside user's workspace): the new session works
// in the agent session's directory (cwd, when given, must be that one,
// else ErrInvalid), and its agent takes the agent session up (see adopt)
// instead of making a new one. An agent session that a gateway session
// not closed holds is ErrAdopted. Without Options.AdoptAgentSessions it
// is ErrAdoptionOff.
func (m *Manager) Adopt(ctx context.Context, user, agentName, agentSessionID, cwd, authMethod string, mcp ...agent.MCPServer) (*Session, error) {
	if agentSessionID == "" {
		return nil, fmt.Errorf("%w: no agent session id to adopt", ErrInvalid)
	}
	return m.create(ctx, user, agentName, cwd, authMethod, agentSessionID, mcp)
}

// adoptable checks that agentName's sessions may be listed and adopted.
func (m *Manager) adoptable(agentName string) error {
	if !m.opts.AdoptAgentSessions {
		return ErrAdoptionOff
	}
	if _, ok := m.opts.Agents[agentName]; !ok {
		return fmt.Errorf("%w %q (configured: %v)", ErrUnknownAgent, agentName, m.AgentNames())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrShutdown
	}
	return nil
}

// adoptedCwd returns the directory a session of user's that adopts
// agentName's session id works in: that session's, as AgentSessions lists
// it. A cwd the client gave must be that one.
func (m *Manager) adoptedCwd(ctx context.Context, user, agentName, id, cwd string) (string, error) {
	if err := m.adoptable(agentName); err != nil {
		return "", err
	}
	var found *AgentSession
	_, err := m.walkAgentSessions(ctx, user, agentName, func(as AgentSession) bool {
		if as.ID == id {
			found = &as
		}
		return found == nil
	})
	switch {
	case err != nil:
		return "", err
	case found == nil:
		return "", fmt.Errorf("%w: agent %q lists no session %q in your workspace", ErrNotFound, agentName, id)
	case cwd == "":
		return found.Cwd, nil
	}
	want, err := m.checkCwd(user, cwd)
	if err != nil {
		return "", err
	}
	if want != found.Cwd {
		return "", fmt.Errorf("%w: cwd %q is not the working directory of the agent's session (%s); leave it empty", ErrInvalid, cwd, found.Cwd)
	}
	return found.Cwd, nil
}

// walkAgentSessions asks agentName for its sessions and calls each with
// those user may adopt, in the agent's order, until each returns false
// or the agent has no more; truncated says it stopped at maxListPages
// pages, or at a cursor it was given before.
func (m *Manager) walkAgentSessions(ctx context.Context, user, agentName string, each func(AgentSession) bool) (truncated bool, err error) {
	done, err := m.listers.take(ctx, user)
	if err != nil {
		return false, err
	}
	defer done()
	a, err := m.startLister(ctx, user, agentName)
	if err != nil {
		return false, err
	}
	defer a.Close()
	seen := map[string]bool{}
	cursor := ""
	for page := 1; ; page++ {
		listed, next, err := a.ListSessions(ctx, cursor)
		if errors.Is(err, agent.ErrUnsupported) {
			return false, fmt.Errorf("%w: the agent does not offer session/list", ErrUnsupported)
		}
		if err != nil {
			return false, agentCallErr("session/list", err)
		}
		for _, ls := range listed {
			as, ok := m.adoptableSession(user, ls)
			if ok && !each(as) {
				return false, nil
			}
		}
		switch {
		case next == "":
			return false, nil
		case page == maxListPages || seen[next]:
			return true, nil
		}
		seen[next], cursor = true, next
	}
}

// listers holds a turn for each user whose agent runs to list their
// sessions. Those agents count in no limit of sessions: one at a time per
// user, no client keeps agents starting.
type listers struct {
	mu   sync.Mutex
	busy map[string]chan struct{} // closed when the user's turn ends
}

// take waits for user's turn (or ctx), and returns what ends it.
func (l *listers) take(ctx context.Context, user string) (done func(), err error) {
	for {
		l.mu.Lock()
		turn, busy := l.busy[user]
		if !busy {
			if l.busy == nil {
				l.busy = map[string]chan struct{}{}
			}
			turn = make(chan struct{})
			l.busy[user] = turn
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.busy, user)
				l.mu.Unlock()
				close(turn)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-turn:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// adoptableSession is what of ls user sees, and whether user may adopt it
// at all: its cwd passes the cwd rule of Create (checkCwd), and its id
// can be given back.
func (m *Manager) adoptableSession(user string, ls agent.ListedSession) (AgentSession, bool) {
	if len(ls.ID) > maxAgentSessionID || !utf8.ValidString(ls.ID) || strings.ContainsFunc(ls.ID, unicode.IsControl) {
		return AgentSession{}, false
	}
	cwd, err := m.checkCwd(user, ls.Cwd)
	if err != nil {
		return AgentSession{}, false
	}
	as := AgentSession{ID: ls.ID, Cwd: cwd, Title: textcut.Prefix(ls.Title, maxAgentSessionTitle)}
	if t, err := time.Parse(time.RFC3339Nano, ls.UpdatedAt); err == nil {
		as.UpdatedAt = t
	}
	return as, true
}

// cutUTF8 cuts s to at most n bytes, not within a character.

// startLister starts agentName to list user's sessions: in user's
// directory of Options.Workspaces (opened as a session's is, with no
// symbolic link followed where cwds are confined; without Workspaces, an
// empty directory of its own), with the environment and the HOME a
// session's agent of user's has, where the agent keeps its sessions.
func (m *Manager) startLister(ctx context.Context, user, agentName string) (*agent.Agent, error) {
	var ws *os.File
	var closers []io.Closer
	if root := m.opts.Workspaces; root != nil {
		dir, err := root.UserDir(user)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPermission, err)
		}
		if m.opts.ConfineCwd {
			ws, err = root.Open(user, dir)
		} else {
			ws, err = openDir(dir)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: your workspace: %w", ErrPermission, err)
		}
	} else {
		dir, err := os.MkdirTemp("", "acp-gateway-list-")
		if err != nil {
			return nil, err
		}
		if ws, err = openDir(dir); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		closers = append(closers, removeDir(dir))
	}
	home := func() (string, error) { return m.agentHome(user) }
	log := m.opts.Log.With("agent", agentName, "lister", true)
	a, err := m.startHelper(ctx, agentName, ws, m.opts.Env, home, "list", log, closers...)
	if err != nil {
		log.Warn("starting an agent to list its sessions failed", "error", err)
		return nil, fmt.Errorf("%w: the agent did not start to list its sessions; the gateway's log says why", ErrAgentGone)
	}
	return a, nil
}

// removeDir removes a directory, with what it holds, when closed.
type removeDir string

func (d removeDir) Close() error { return os.RemoveAll(string(d)) }

// openDir opens dir for an agent to work in (see workspace.OpenDir).
func openDir(dir string) (*os.File, error) {
	f, err := workspace.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", dir, errors.Unwrap(err))
	}
	return f, nil
}

// claim makes sure that no gateway session not closed holds agentName's
// session agentSID ("": nothing to claim), before the caller records one
// that does, and returns what lets go of the claim once that record is
// made. m.creating must be held: on one gateway, claims and records are
// made one at a time. With a store shared by replicas, the check and the
// record are made under a lease of their own on the agent session, taken
// for the lease TTL, so that two replicas do not adopt it at once.
func (m *Manager) claim(ctx context.Context, agentName, agentSID string) (release func(), err error) {
	release = func() {}
	if agentSID == "" {
		return release, nil
	}
	if m.leaser != nil {
		key := claimKey(agentName, agentSID)
		err := m.leaser.AcquireLease(ctx, key, m.opts.Replica, m.opts.LeaseTTL)
		if errors.Is(err, statestore.ErrLeaseHeld) {
			return release, fmt.Errorf("%w: another request is adopting it now", ErrAdopted)
		}
		if err != nil {
			return release, err
		}
		release = func() {
			ctx, cancel := m.storeContext()
			defer cancel()
			if err := m.leaser.ReleaseLease(ctx, key, m.opts.Replica); err != nil {
				m.opts.Log.Warn("store: releasing the claim on an adopted agent session", "error", err)
			}
		}
	}
	recs, err := m.opts.Store.ListSessions(ctx, "")
	if err != nil {
		release()
		return func() {}, err
	}
	for _, r := range recs {
		if r.Agent == agentName && r.AgentSessionID == agentSID && r.State != statestore.StateClosed {
			release()
			return func() {}, ErrAdopted
		}
	}
	return release, nil
}

// claimKey names the lease of claim on agentName's session agentSID: not
// a session id (those start with "s_").
func claimKey(agentName, agentSID string) string {
	sum := sha256.Sum256([]byte(agentName + "\x00" + agentSID))
	return "adopt-" + hex.EncodeToString(sum[:20])
}

// adopt takes agent a's session sid up for s, whose history the agent
// replays, where it can, as session/update notifications that s records
// as its first events: ACP v2 session/resume from the start
// (replayFrom), v1 session/load; else v1 session/resume, which replays
// nothing. It returns how, for the session's state.
func (s *Session) adopt(ctx context.Context, a *agent.Agent, sid string) (how string, setup agent.SessionSetup, err error) {
	caps := a.Capabilities()
	method := "session/resume"
	switch {
	case a.Version() >= acpjson.V2 && caps.Resume:
		how = "adopted the agent's session with session/resume, its history replayed"
		setup, err = a.ResumeReplay(ctx, sid, s.rec.Cwd)
	case caps.Load:
		how, method = "adopted the agent's session with session/load, its history replayed", "session/load"
		setup, err = a.Load(ctx, sid, s.rec.Cwd)
	case caps.Resume:
		how = "adopted the agent's session with session/resume (the agent replays no history)"
		setup, err = a.Resume(ctx, sid, s.rec.Cwd)
	default:
		return "", setup, fmt.Errorf("%w: the agent offers neither session/resume nor session/load, so its sessions cannot be adopted", ErrUnsupported)
	}
	switch {
	case authRequired(err):
		return "", setup, fmt.Errorf("%w: the agent requires authentication: name one of its methods %v in authMethod", ErrInvalid, a.AuthMethodIDs())
	case err != nil:
		return "", setup, agentCallErr(method, err)
	}
	return how, setup, nil
}
