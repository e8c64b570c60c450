package metrics

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Session records one session's metrics: the aggregates by its agent, and
// its own series when it got a slot under the cap. Its methods are safe for
// concurrent use, and do nothing on a nil *Session (a session this gateway
// reads but does not run).
type Session struct {
	m         *Metrics
	id, agent string
	labels    prometheus.Labels

	// Per-session series; nil when the session has none.
	updates, events    prometheus.Counter
	watchers, activity prometheus.Gauge
	tools              *prometheus.GaugeVec

	// byKind holds the aggregate counters of the agent's updates by kind,
	// each looked up once: the lookup hashed both labels for every update.
	mu     sync.Mutex
	byKind map[string]prometheus.Counter

	endOnce sync.Once
}

// StartSession starts counting session id of agent as active and gives it
// per-session series if the cap allows. created counts it as created too;
// a session being created can be counted later with [Session.Created].
func (m *Metrics) StartSession(id, agent string, created bool) *Session {
	m.sessionsActive.WithLabelValues(agent).Inc()
	s := &Session{m: m, id: id, agent: agent}
	if created {
		s.Created()
	}
	m.mu.Lock()
	ok := m.max > 0 && m.series < m.max
	if ok {
		m.series++
		m.seriesActive.Set(float64(m.series))
	}
	m.mu.Unlock()
	if !ok {
		m.seriesSkipped.Inc()
		return s
	}
	s.labels = prometheus.Labels{"session_id": id, "agent": agent}
	s.updates = m.sUpdates.With(s.labels)
	s.events = m.sEvents.With(s.labels)
	s.watchers = m.sWatchers.With(s.labels)
	s.activity = m.sActivity.With(s.labels)
	s.tools = m.sTools.MustCurryWith(s.labels)
	s.activity.SetToCurrentTime()
	return s
}

// End counts the session as no longer active and removes its series. Only
// the first call counts.
func (s *Session) End() {
	if s == nil {
		return
	}
	s.endOnce.Do(func() {
		s.m.sessionsActive.WithLabelValues(s.agent).Dec()
		if s.labels == nil {
			return
		}
		for _, v := range []interface {
			DeletePartialMatch(prometheus.Labels) int
		}{s.m.sUpdates, s.m.sEvents, s.m.sTools, s.m.sWatchers, s.m.sActivity} {
			v.DeletePartialMatch(prometheus.Labels{"session_id": s.id})
		}
		s.m.mu.Lock()
		s.m.series--
		s.m.seriesActive.Set(float64(s.m.series))
		s.m.mu.Unlock()
	})
}

// Created counts the session as created.
func (s *Session) Created() {
	if s != nil {
		s.m.sessionsCreated.WithLabelValues(s.agent).Inc()
	}
}

// HasSeries reports whether the session has per-session series.
func (s *Session) HasSeries() bool { return s != nil && s.labels != nil }

// Update counts a session update of kind from the agent.
func (s *Session) Update(kind string) {
	if s == nil {
		return
	}
	s.kindCounter(kind).Inc()
	if s.updates != nil {
		s.updates.Inc()
	}
}

// kindCounter returns the counter of the agent's updates of kind.
func (s *Session) kindCounter(kind string) prometheus.Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.byKind[kind]
	if !ok {
		c = s.m.updates.WithLabelValues(s.agent, kind)
		if s.byKind == nil {
			s.byKind = map[string]prometheus.Counter{}
		}
		s.byKind[kind] = c
	}
	return c
}

// Events counts n events recorded in the session's log.
func (s *Session) Events(n int) {
	if s != nil && s.events != nil {
		s.events.Add(float64(n))
		s.activity.SetToCurrentTime()
	}
}

// Watchers moves the count of streams following the session by delta.
func (s *Session) Watchers(delta int) {
	if s != nil && s.watchers != nil {
		s.watchers.Add(float64(delta))
	}
}

// ToolStatus moves one tool call of the session from status from ("" for a
// new call) to status to.
func (s *Session) ToolStatus(from, to string) {
	if s == nil || s.tools == nil || from == to {
		return
	}
	if from != "" {
		s.tools.WithLabelValues(bounded(from, toolStatus)).Dec()
	}
	s.tools.WithLabelValues(bounded(to, toolStatus)).Inc()
}

// ToolCallFinished counts a tool call of kind that reached final status
// after d from its first update.
func (s *Session) ToolCallFinished(kind, status string, d time.Duration) {
	if s == nil {
		return
	}
	kind, status = bounded(kind, toolKinds), bounded(status, toolStatus)
	s.m.toolCalls.WithLabelValues(s.agent, kind, status).Inc()
	s.m.toolDuration.WithLabelValues(s.agent, kind, status).Observe(d.Seconds())
}

// TurnEnded counts a turn that ended with stopReason ("error" when it
// failed) after running d.
func (s *Session) TurnEnded(stopReason string, d time.Duration) {
	if s == nil {
		return
	}
	if stopReason != "error" {
		stopReason = bounded(stopReason, stopReasons)
	}
	s.m.turns.WithLabelValues(s.agent, stopReason).Inc()
	s.m.turnDuration.WithLabelValues(s.agent).Observe(d.Seconds())
}

// PermissionAnswered counts a permission request answered with outcome
// after waiting d.
func (s *Session) PermissionAnswered(outcome string, d time.Duration) {
	if s == nil {
		return
	}
	if outcome != "cancelled" && outcome != "timed_out" {
		outcome = bounded(outcome, optionKinds)
	}
	s.m.permissions.WithLabelValues(s.agent, outcome).Inc()
	s.m.permAnswer.WithLabelValues(s.agent).Observe(d.Seconds())
}

// ElicitationAnswered counts an elicitation of mode answered with action
// (or timed_out) after waiting d.
func (s *Session) ElicitationAnswered(mode, action string, d time.Duration) {
	if s == nil {
		return
	}
	if action != "timed_out" {
		action = bounded(action, elicitActions)
	}
	s.m.elicits.WithLabelValues(s.agent, bounded(mode, elicitModes), action).Inc()
	s.m.elicitAnswer.WithLabelValues(s.agent).Observe(d.Seconds())
}

// The label values of elicitations_total; others are "other".
var (
	elicitModes   = []string{"form", "url"}
	elicitActions = []string{"accept", "decline", "cancel"}
)

// AgentStarted counts an agent process that started and answered
// initialize after took.
func (s *Session) AgentStarted(took time.Duration) {
	if s == nil {
		return
	}
	s.m.agentStarts.WithLabelValues(s.agent).Inc()
	s.m.agentStartTime.WithLabelValues(s.agent).Observe(took.Seconds())
}

// AgentExited counts an agent process that ended for reason (see
// acp_gateway_agent_exits_total).
func (s *Session) AgentExited(reason string) {
	if s == nil {
		return
	}
	s.m.agentExits.WithLabelValues(s.agent, reason).Inc()
}

// AgentIO returns the counters of bytes read from and written to the
// session's agent.
func (s *Session) AgentIO() (in, out prometheus.Counter) {
	if s == nil {
		return nil, nil
	}
	return s.m.agentBytesIn.WithLabelValues(s.agent), s.m.agentBytesOut.WithLabelValues(s.agent)
}

// Label values that come from agents are bounded to the values ACP
// defines: anything else (custom `_`-prefixed values, typos) counts as
// "other", so that an agent cannot grow the number of series.
var (
	toolKinds   = []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode"}
	toolStatus  = []string{"pending", "in_progress", "completed", "failed"}
	optionKinds = []string{"allow_once", "allow_always", "reject_once", "reject_always"}
	stopReasons = []string{"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}
)

func bounded(v string, known []string) string {
	if slices.Contains(known, v) {
		return v
	}
	return "other"
}
