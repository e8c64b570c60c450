package session

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
)

// Fencing: a session's agent acts only while its replica holds the
// session's lease.
//
// A replica holds a lease it took or renewed for LeaseTTL from when its
// call started at least: the store sets the lease's end as it takes the
// call, later. So the lease is surely held until the call's start plus
// LeaseTTL, by this replica's clock, and another replica can take the
// session over (and start an agent for it) only after that. A session's
// fence keeps the start of its last lease call that succeeded, and at
// that time plus LeaseTTL less a margin of LeaseTTL/fenceMarginDiv with
// no later success, it freezes the agent (agent.Freeze: its processes
// stop, and its output is no longer read; what was read is queued for
// the store as ever). The renewal runs every LeaseTTL/3, so a freeze
// comes after two renewals failed; the margin covers the time the freeze
// takes to reach every process. When a renewal then succeeds, the session
// is still this replica's unless another took it meanwhile (its lease
// lapsed) and let it go again: such a replica wrote to the log (it marked
// the agent lost), so the log is read first, and the agent is thawed
// when the log holds nothing this replica did not number. When another
// replica holds the lease, or wrote to the log, the agent is killed at
// once, before the session is let go.
//
// The fence is per session, as leases are: each is renewed by a call of
// its own, which may fail alone (a slow store times out the last calls of
// a renewal round), and a replica with many sessions renews them one after
// the other, over up to LeaseTTL/3.
//
// A timer freezes the agent on time, whatever the lease upkeep is doing (a
// call to a store that does not answer waits for its timeout). A gateway
// process that was itself stopped (SIGSTOP) runs no timer: once it runs
// again, the agent's read loop (agent.Config.Fence) and the lease upkeep
// both check the fence first, so that nothing more of the agent's output
// is handled before the agent is frozen.

// fenceMarginDiv sets the fence's margin: LeaseTTL/fenceMarginDiv before
// the lease may lapse (1.7 s of the default 10 s).
const fenceMarginDiv = 6

// monoNow is the time since m.clockBase, the origin of the fences' times:
// monotonic, as time.Since reads it, so that a change of the wall clock
// moves no fence.
func (m *Manager) monoNow() int64 { return int64(m.opts.Clock.Since(m.clockBase)) }

// fence keeps a session's agent from acting past its replica's lease.
type fence struct {
	// until is when (Manager.monoNow) the agent is frozen unless the lease is
	// renewed first; 0 while no lease is kept (a store not shared).
	until atomic.Int64
	// agent is the agent last started for the session.
	agent atomic.Pointer[agent.Agent]

	// mu serialises what is done to the agent.
	mu sync.Mutex
	// frozen: past until, with no renewal since that was checked; killed:
	// the session was let go, and an agent that starts now is killed.
	frozen, killed bool
	timer          clockwork.Timer
}

// leaseHeld notes that a lease call for s, started at start, succeeded,
// and arms the fence. It reports whether the agent is frozen: the caller
// checks the log before it thaws it (renewed).
func (s *Session) leaseHeld(start time.Time) bool {
	f := &s.fence
	ttl := s.m.opts.LeaseTTL
	until := int64(start.Sub(s.m.clockBase) + ttl - ttl/fenceMarginDiv)
	f.mu.Lock()
	defer f.mu.Unlock()
	if until > f.until.Load() {
		f.until.Store(until)
	}
	wait := time.Duration(f.until.Load() - s.m.monoNow())
	if f.timer == nil {
		f.timer = s.m.opts.Clock.AfterFunc(wait, s.freezeIfDue)
	} else {
		f.timer.Reset(wait)
	}
	return f.frozen
}

// stopFence stops the fence's timer of a session let go.
func (s *Session) stopFence() {
	f := &s.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer != nil {
		f.timer.Stop()
	}
	f.until.Store(0)
}

// fenceAgent is agent a's agent.Config.Fence: it makes a the agent the
// fence acts on, frozen at once if the fence is, and freezes it when the
// lease's renewal is overdue.
func (s *Session) fenceAgent(a *agent.Agent) {
	f := &s.fence
	if f.agent.Load() != a {
		f.mu.Lock()
		f.agent.Store(a)
		switch {
		case f.killed:
			s.killLocked(a, "the session was let go as its agent started")
		case f.frozen:
			s.freezeLocked(a)
		}
		f.mu.Unlock()
	}
	s.freezeIfDue()
}

// freezeIfDue freezes the session's agent if its lease's renewal is
// overdue.
func (s *Session) freezeIfDue() {
	f := &s.fence
	if u := f.until.Load(); u == 0 || s.m.monoNow() < u {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := f.until.Load(); f.frozen || u == 0 || s.m.monoNow() < u {
		return // renewed, or let go, meanwhile
	}
	f.frozen = true
	s.log.Warn("the session's lease was not renewed in time: freezing its agent until it is",
		"lease_ttl", s.m.opts.LeaseTTL)
	if a := f.agent.Load(); a != nil {
		s.freezeLocked(a)
	}
}

// freezeLocked freezes a, or kills it when it cannot be frozen. s.fence.mu
// must be held.
func (s *Session) freezeLocked(a *agent.Agent) {
	if err := a.Freeze(); err != nil {
		s.killLocked(a, "it could not be frozen: "+err.Error())
		return
	}
	s.m.opts.Metrics.AgentFenced("freeze")
}

// killLocked kills agent a, fenced, saying why. s.fence.mu must be held.
func (s *Session) killLocked(a *agent.Agent, why string) {
	s.log.Warn("killing the session's agent: " + why)
	a.Kill()
	s.m.opts.Metrics.AgentFenced("kill")
}

// fenced reports whether the session's agent is frozen for its lease.
func (s *Session) fenced() bool {
	s.fence.mu.Lock()
	defer s.fence.mu.Unlock()
	return s.fence.frozen
}

// killFenced kills the session's agent at once, for a session another
// replica may run by now, and any agent that starts for it later.
func (s *Session) killFenced(why string) {
	f := &s.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = true
	if f.timer != nil {
		f.timer.Stop()
	}
	if a := f.agent.Load(); a != nil && a.Err() == nil {
		s.killLocked(a, why)
	}
}

// renewed follows a renewal of s's lease that started at start and
// succeeded: a frozen agent is thawed when the log shows the session is
// still this replica's, and killed, the session let go, when it shows
// another replica wrote to it.
func (m *Manager) renewed(ctx context.Context, s *Session, start time.Time) {
	if !s.leaseHeld(start) {
		return
	}
	rec, err := m.opts.Store.GetSession(ctx, s.rec.ID)
	if err != nil {
		m.storeFailed()
		s.log.Error("store: reading the session before thawing its agent; it stays frozen", "error", err)
		return
	}
	s.mu.Lock()
	stored, numbered, first := s.stored, s.seq, s.firstUnstoredLocked()
	s.mu.Unlock()
	if rec.LastSeq > stored {
		// The log went past what this replica knows it stored: its own
		// append whose answer was lost, or another replica's after a
		// takeover. Only the former holds this replica's next event.
		got, err := m.opts.Store.Events(ctx, s.rec.ID, stored, 1)
		if err != nil {
			m.storeFailed()
			s.log.Error("store: reading the session's log before thawing its agent; it stays frozen", "error", err)
			return
		}
		if rec.LastSeq > numbered || first == nil || len(got) != 1 || !bytes.Equal(got[0].Proto(), first.Proto()) {
			s.log.Warn("another replica wrote to the session's log while its lease had lapsed: letting it go",
				"stored_seq", rec.LastSeq, "numbered_seq", numbered)
			m.drop(s)
			return
		}
	}
	f := &s.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen || f.killed || s.m.monoNow() >= f.until.Load() {
		return
	}
	f.frozen = false
	a := f.agent.Load()
	if a == nil {
		return
	}
	if err := a.Thaw(); err != nil {
		s.killLocked(a, "it could not be thawed: "+err.Error())
		return
	}
	s.m.opts.Metrics.AgentFenced("thaw")
	s.log.Info("the session's lease was renewed: its agent runs again")
}
