// Package metrics defines the gateway's Prometheus metrics: aggregates by
// agent, and per-session series labelled session_id that are removed when
// the session ends, under a cap that keeps their cardinality bounded.
//
// Every name starts with acp_gateway_, counters end in _total, durations
// are histograms in seconds and sizes are in bytes, as the Prometheus naming
// conventions ask.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/acp-gateway/acp-gateway/internal/buildinfo"
)

// DefaultMaxSessionSeries is the number of sessions that get per-session
// series when Options.MaxSessionSeries is zero. Each such session costs at
// most nine series (four, and one per tool-call status: five at most), so
// the cap keeps a scrape under nine thousand per-session series, which one
// Prometheus handles comfortably per target.
const DefaultMaxSessionSeries = 1000

// Options configure Metrics.
type Options struct {
	// MaxSessionSeries caps the sessions that have per-session series at
	// once. Sessions beyond it are counted in the aggregates only (and in
	// acp_gateway_session_series_skipped_total). Zero means
	// DefaultMaxSessionSeries; negative turns per-session series off.
	MaxSessionSeries int
	// Sandbox names how agents are confined (`none`, `bwrap`), for
	// acp_gateway_agent_sandbox_info; empty is `none`.
	Sandbox string
	// AgentLimits are the limits on each agent's process tree, by
	// resource (memory_bytes, pids, cpu, open_files, file_size_bytes),
	// for acp_gateway_agent_limit; a resource left out has none.
	AgentLimits map[string]float64
}

const namespace = "acp_gateway"

// Buckets of the duration histograms, in seconds.
var (
	startBuckets      = prometheus.ExponentialBuckets(0.01, 2, 12)   // 10ms to 20s
	turnBuckets       = prometheus.ExponentialBuckets(0.1, 2.5, 12)  // 100ms to 100min
	toolCallBuckets   = prometheus.ExponentialBuckets(0.01, 3, 12)   // 10ms to 30min
	permissionBuckets = prometheus.ExponentialBuckets(0.1, 2.5, 10)  // 100ms to 10min
	storeBuckets      = prometheus.ExponentialBuckets(0.0001, 4, 10) // 100µs to 26s
)

// Metrics holds the gateway's collectors in their own registry.
type Metrics struct {
	reg *prometheus.Registry
	max int

	sessionsActive  *prometheus.GaugeVec
	sessionsCreated *prometheus.CounterVec

	agentStarts    *prometheus.CounterVec
	agentExits     *prometheus.CounterVec
	agentStartTime *prometheus.HistogramVec
	agentBytesIn   *prometheus.CounterVec
	agentBytesOut  *prometheus.CounterVec

	turns        *prometheus.CounterVec
	turnDuration *prometheus.HistogramVec
	updates      *prometheus.CounterVec
	toolCalls    *prometheus.CounterVec
	toolDuration *prometheus.HistogramVec
	permissions  *prometheus.CounterVec
	permAnswer   *prometheus.HistogramVec
	elicits      *prometheus.CounterVec
	elicitAnswer *prometheus.HistogramVec

	streams    *prometheus.GaugeVec
	acpConns   *prometheus.GaugeVec
	eventsSent *prometheus.CounterVec
	cutOff     *prometheus.CounterVec

	storeLatency *prometheus.HistogramVec
	storeErrors  *prometheus.CounterVec
	notStored    prometheus.Counter
	fenced       *prometheus.CounterVec
	dataLost     prometheus.Counter

	seriesSkipped prometheus.Counter
	seriesActive  prometheus.Gauge

	// Per-session series.
	sUpdates  *prometheus.CounterVec
	sEvents   *prometheus.CounterVec
	sTools    *prometheus.GaugeVec
	sWatchers *prometheus.GaugeVec
	sActivity *prometheus.GaugeVec

	mu     sync.Mutex
	series int // sessions with per-session series now
}

// New returns Metrics registered in a new registry with the Go runtime and
// process collectors and acp_gateway_build_info.
func New(opts Options) *Metrics {
	limit := opts.MaxSessionSeries
	if limit == 0 {
		limit = DefaultMaxSessionSeries
	}
	f := factory{prometheus.NewRegistry()}
	agent := []string{"agent"}
	session := []string{"session_id", "agent"}
	m := &Metrics{
		reg: f.reg,
		max: limit,

		sessionsActive: f.gauge("sessions_active",
			"Sessions this gateway runs now (not closed), by agent.", agent),
		sessionsCreated: f.counter("sessions_created_total",
			"Sessions created on this gateway, by agent.", agent),

		agentStarts: f.counter("agent_starts_total",
			"Agent processes started and initialised, by agent.", agent),
		agentExits: f.counter("agent_exits_total",
			"Agent processes ended, by agent and reason: stopped (by the gateway: close, idle, shutdown), "+
				"exited (status 0 on its own), failed (non-zero status), killed (by a signal not the gateway's), "+
				"protocol_error (bad output), start_failed (never initialised).", []string{"agent", "reason"}),
		agentStartTime: f.histogram("agent_start_duration_seconds",
			"Time from spawning an agent to its answer to initialize.", agent, startBuckets),
		agentBytesIn: f.counter("agent_received_bytes_total",
			"Bytes read from agents' stdout.", agent),
		agentBytesOut: f.counter("agent_sent_bytes_total",
			"Bytes written to agents' stdin.", agent),

		turns: f.counter("turns_total",
			"Prompt turns ended, by agent and stop reason (error when the turn failed).", []string{"agent", "stop_reason"}),
		turnDuration: f.histogram("turn_duration_seconds",
			"Duration of prompt turns, from the prompt to the turn's end.", agent, turnBuckets),
		updates: f.counter("updates_total",
			"Session updates received from agents, by agent and update kind.", []string{"agent", "kind"}),
		toolCalls: f.counter("tool_calls_total",
			"Tool calls that reached a final status (completed or failed), by agent, tool kind and status.",
			[]string{"agent", "kind", "status"}),
		toolDuration: f.histogram("tool_call_duration_seconds",
			"Time from a tool call's first update to its final status.", []string{"agent", "kind", "status"}, toolCallBuckets),
		permissions: f.counter("permission_requests_total",
			"Permission requests answered, by agent and outcome: the kind of the chosen option "+
				"(allow_once, reject_always, ...), cancelled, or timed_out.", []string{"agent", "outcome"}),
		permAnswer: f.histogram("permission_answer_duration_seconds",
			"Time from a permission request to its answer.", agent, permissionBuckets),
		elicits: f.counter("elicitations_total",
			"Elicitations answered, by agent, mode (form, url, other) and action: accept, decline, cancel, or timed_out.",
			[]string{"agent", "mode", "action"}),
		elicitAnswer: f.histogram("elicitation_answer_duration_seconds",
			"Time from an elicitation to its answer.", agent, permissionBuckets),

		streams: f.gauge("streams_connected",
			"Server streams open now, by RPC (Prompt, Watch).", []string{"rpc"}),
		acpConns: f.gauge("acp_connections",
			"Connections open now on the /acp endpoint, by transport (websocket, http).", []string{"transport"}),
		eventsSent: f.counter("events_sent_total",
			"Session events sent on server streams, by RPC.", []string{"rpc"}),
		cutOff: f.counter("streams_cut_off_total",
			"Server streams cut off because the client fell too far behind, by RPC.", []string{"rpc"}),

		storeLatency: f.histogram("store_operation_duration_seconds",
			"Latency of state store operations, by operation.", []string{"operation"}, storeBuckets),
		storeErrors: f.counter("store_errors_total",
			"State store operations that failed, by operation.", []string{"operation"}),
		dataLost: f.counter("store_data_lost_total",
			"Times the store was found to have lost data it had taken (a Redis that restarted without its data): every session of this gateway was stopped.", nil).WithLabelValues(),
		notStored: f.counter("events_not_stored_total",
			"Session events the store could not take before the gateway gave up on it (--store-outage-timeout): never sent to a client; their sessions were stopped.", nil).WithLabelValues(),
		fenced: f.counter("agents_fenced_total",
			"Agents fenced for their session's lease, by action: freeze (the lease's renewal was overdue), "+
				"thaw (renewed, the session still this gateway's), kill (another replica holds the lease or wrote the log, or the agent could not be frozen).",
			[]string{"action"}),

		seriesSkipped: f.counter("session_series_skipped_total",
			"Sessions that got no per-session series because the cap was reached or they are off.", nil).WithLabelValues(),
		seriesActive: f.gauge("session_series_sessions",
			"Sessions that have per-session series now.", nil).WithLabelValues(),

		sUpdates: f.counter("session_updates_total",
			"Session updates received from the agent, per session.", session),
		sEvents: f.counter("session_events_total",
			"Events recorded in the session's log, per session.", session),
		sTools: f.gauge("session_tool_calls",
			"Tool calls of the session, by current status.", append(session, "status")),
		sWatchers: f.gauge("session_watchers",
			"Streams following the session on this gateway.", session),
		sActivity: f.gauge("session_last_activity_timestamp_seconds",
			"When the session last recorded an event, in Unix seconds.", session),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	)
	mode := opts.Sandbox
	if mode == "" {
		mode = "none"
	}
	f.gauge("agent_sandbox_info", "How agents are confined: always 1, labelled with the --sandbox mode (none, bwrap).",
		[]string{"mode"}).WithLabelValues(mode).Set(1)
	limits := f.gauge("agent_limit", "The limit on each agent's whole process tree, by resource (memory_bytes, pids, cpu, open_files, file_size_bytes); a resource without a limit has no series.",
		[]string{"resource"})
	for resource, v := range opts.AgentLimits {
		limits.WithLabelValues(resource).Set(v)
	}
	return m
}

// factory makes collectors and registers them.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string, labels []string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string, labels []string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, labels []string, buckets []float64) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

// buildInfo is acp_gateway_build_info: 1, labelled with the version,
// revision and Go version of the binary (see internal/buildinfo).
func buildInfo() prometheus.Collector {
	bi := buildinfo.Get()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Build of this gateway: always 1, labelled with version, revision and Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	}, func() float64 { return 1 })
}

// Registry is the registry holding every collector.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the Prometheus text (or OpenMetrics) exposition.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// StreamOpened counts a server stream of rpc as connected; the returned
// function counts it gone.
func (m *Metrics) StreamOpened(rpc string) (closed func()) {
	g := m.streams.WithLabelValues(rpc)
	g.Inc()
	return func() { g.Dec() }
}

// ACPConnectionOpened counts a connection of transport open on /acp; the
// returned function counts it closed.
func (m *Metrics) ACPConnectionOpened(transport string) (closed func()) {
	g := m.acpConns.WithLabelValues(transport)
	g.Inc()
	return func() { g.Dec() }
}

// EventsSent counts n events sent on a stream of rpc.
func (m *Metrics) EventsSent(rpc string, n int) { m.eventsSent.WithLabelValues(rpc).Add(float64(n)) }

// StoreDataLost counts a store found to have lost its data.
func (m *Metrics) StoreDataLost() { m.dataLost.Inc() }

// EventsNotStored counts n events given up on because the store could
// not take them.
func (m *Metrics) EventsNotStored(n int) { m.notStored.Add(float64(n)) }

// AgentFenced counts an agent fenced for its session's lease: action is
// freeze, thaw or kill.
func (m *Metrics) AgentFenced(action string) { m.fenced.WithLabelValues(action).Inc() }

// CutOff counts a stream of rpc cut off for lagging.
func (m *Metrics) CutOff(rpc string) { m.cutOff.WithLabelValues(rpc).Inc() }

// since is time.Since in seconds.
func since(t time.Time) float64 { return time.Since(t).Seconds() }
