package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// scrape is one parsed GET /metrics.
type scrape map[string]*dto.MetricFamily

func (g *gateway) scrape(t *testing.T) scrape {
	t.Helper()
	res, err := http.Get(g.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value returns the value of the series of name whose labels include
// labels ("k=v" each), and whether there is one. Histograms give their
// sample count.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// want fails the test unless the series exists with value v.
func (s scrape) want(t *testing.T, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := s.value(name, labels...)
	if !ok {
		t.Errorf("no series %s%v", name, labels)
	} else if got != v {
		t.Errorf("%s%v = %v, want %v", name, labels, got, v)
	}
}

// sessionSeries lists the metric names that have a series for session id.
func (s scrape) sessionSeries(id string) []string {
	var names []string
	for name := range s {
		if _, ok := s.value(name, "session_id="+id); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func TestMetricsThroughTheServer(t *testing.T) {
	t.Parallel()
	// A cap of one session with per-session series.
	g := permissionGateway(t, gatewayOpts{sessionSeries: 1})
	a := g.create(t, "perm")
	events := turn(t, g.connect, a, func(ev *acpv2.SessionEvent) {
		if pr := ev.GetPermissionRequest(); pr != nil {
			if _, err := g.connect.RespondPermission(context.Background(), connect.NewRequest(&acpv2.RespondPermissionRequest{
				SessionId: a, RequestId: pr.GetRequestId(), OptionId: "allow-once"})); err != nil {
				t.Errorf("RespondPermission: %v", err)
			}
		}
	})
	lastSeq := float64(events[len(events)-1].GetSeq())

	s := g.scrape(t)
	agent := "agent=perm"
	s.want(t, 1, "acp_gateway_sessions_active", agent)
	s.want(t, 1, "acp_gateway_sessions_created_total", agent)
	s.want(t, 1, "acp_gateway_agent_starts_total", agent)
	s.want(t, 1, "acp_gateway_agent_start_duration_seconds", agent)
	s.want(t, 1, "acp_gateway_turns_total", agent, "stop_reason=end_turn")
	s.want(t, 1, "acp_gateway_turn_duration_seconds", agent)
	// The agent's one update; the gateway's merge of the answered
	// request's call is not the agent's, and not counted.
	s.want(t, 1, "acp_gateway_updates_total", agent, "kind=tool_call_update")
	// The agent's update gives the call no kind: it has the request's,
	// merged once the request was answered.
	s.want(t, 1, "acp_gateway_tool_calls_total", agent, "kind=edit", "status=completed")
	s.want(t, 1, "acp_gateway_tool_call_duration_seconds", agent, "kind=edit", "status=completed")
	s.want(t, 1, "acp_gateway_permission_requests_total", agent, "outcome=allow_once")
	s.want(t, 1, "acp_gateway_permission_answer_duration_seconds", agent)
	s.want(t, float64(len(events)), "acp_gateway_events_sent_total", "rpc=Prompt")
	s.want(t, 1, "acp_gateway_build_info")
	for _, name := range []string{"acp_gateway_agent_received_bytes_total", "acp_gateway_agent_sent_bytes_total"} {
		if v, _ := s.value(name, agent); v <= 0 {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if v, _ := s.value("acp_gateway_store_operation_duration_seconds", "operation=append"); v < lastSeq/2 {
		t.Errorf("store appends observed: %v, want at least %v", v, lastSeq/2)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if s[name] == nil {
			t.Errorf("no %s: the runtime and process collectors are missing", name)
		}
	}
	// Per session.
	id := "session_id=" + a
	s.want(t, 1, "acp_gateway_session_updates_total", id, agent)
	s.want(t, lastSeq, "acp_gateway_session_events_total", id)
	s.want(t, 1, "acp_gateway_session_tool_calls", id, "status=completed")
	s.want(t, 0, "acp_gateway_session_watchers", id)
	if v, _ := s.value("acp_gateway_session_last_activity_timestamp_seconds", id); time.Since(time.Unix(int64(v), 0)) > time.Minute {
		t.Errorf("last activity %v is not recent", v)
	}
	for name := range s {
		if !strings.HasPrefix(name, "acp_gateway_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("metric %s has none of the prefixes acp_gateway_, go_, process_", name)
		}
	}

	// Over the cap: a second session is counted, without series of its own.
	b := g.create(t, "perm")
	s = g.scrape(t)
	s.want(t, 2, "acp_gateway_sessions_active", agent)
	s.want(t, 1, "acp_gateway_session_series_skipped_total")
	if names := s.sessionSeries(b); len(names) > 0 {
		t.Errorf("session over the cap has series %v", names)
	}

	// Closing the first removes its series and frees its slot.
	if _, err := g.connect.CloseSession(context.Background(), connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: a})); err != nil {
		t.Fatal(err)
	}
	s = g.scrape(t)
	if names := s.sessionSeries(a); len(names) > 0 {
		t.Errorf("series of the closed session remain: %v", names)
	}
	s.want(t, 1, "acp_gateway_sessions_active", agent)
	s.want(t, 1, "acp_gateway_agent_exits_total", agent, "reason=stopped")
	c := g.create(t, "perm")

	// A watcher shows on the session and in the aggregate while connected.
	stream, cancel := openWatch(t, g.connect, c)
	s = g.scrape(t)
	s.want(t, 1, "acp_gateway_session_watchers", "session_id="+c)
	s.want(t, 1, "acp_gateway_streams_connected", "rpc=Watch")
	cancel()
	stream.Close()
	testutil.WaitFor(t, "the watcher to be counted gone", func() bool {
		s := g.scrape(t)
		w, _ := s.value("acp_gateway_session_watchers", "session_id="+c)
		n, _ := s.value("acp_gateway_streams_connected", "rpc=Watch")
		return w == 0 && n == 0
	})
}

func TestSessionSeriesCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	g := permissionGateway(t, gatewayOpts{sessionSeries: -1})
	id := g.create(t, "perm")
	s := g.scrape(t)
	if names := s.sessionSeries(id); len(names) > 0 {
		t.Errorf("per-session series while turned off: %v", names)
	}
	s.want(t, 1, "acp_gateway_sessions_active", "agent=perm")
}
