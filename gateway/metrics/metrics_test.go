package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	"github.com/acp-gateway/acp-gateway/internal/buildinfo"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/statestore"
)

func TestSessionSeriesCapFreesSlotsOnEnd(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{MaxSessionSeries: 2})
	a := m.StartSession("a", "demo", true)
	b := m.StartSession("b", "demo", true)
	c := m.StartSession("c", "demo", true)
	if !a.HasSeries() || !b.HasSeries() || c.HasSeries() {
		t.Fatalf("series: a %v b %v c %v, want the first two only", a.HasSeries(), b.HasSeries(), c.HasSeries())
	}
	a.End()
	a.End() // a second End changes nothing
	d := m.StartSession("d", "demo", false)
	if !d.HasSeries() {
		t.Fatal("the slot a freed was not reused")
	}
	want := `
# HELP acp_gateway_sessions_active Sessions this gateway runs now (not closed), by agent.
# TYPE acp_gateway_sessions_active gauge
acp_gateway_sessions_active{agent="demo"} 3
# HELP acp_gateway_sessions_created_total Sessions created on this gateway, by agent.
# TYPE acp_gateway_sessions_created_total counter
acp_gateway_sessions_created_total{agent="demo"} 3
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"acp_gateway_sessions_active", "acp_gateway_sessions_created_total"); err != nil {
		t.Fatal(err)
	}
}

func TestAgentValuesCannotGrowTheSeries(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	s := m.StartSession("a", "demo", true)
	for i := range 50 {
		custom := "_custom_" + strings.Repeat("x", i)
		s.ToolCallFinished(custom, "completed", time.Millisecond)
		s.TurnEnded(custom, time.Second)
		s.PermissionAnswered(custom, time.Second)
		s.ElicitationAnswered(custom, custom, time.Second)
		s.ToolStatus("", custom)
	}
	for name, want := range map[string]int{
		"acp_gateway_tool_calls_total":           1,
		"acp_gateway_turns_total":                1,
		"acp_gateway_permission_requests_total":  1,
		"acp_gateway_elicitations_total":         1,
		"acp_gateway_session_tool_calls":         1,
		"acp_gateway_tool_call_duration_seconds": 1,
	} {
		if n := testutil.CollectAndCount(m.Registry(), name); n != want {
			t.Errorf("%s has %d series, want %d", name, n, want)
		}
	}
}

func TestNilSessionDoesNothing(t *testing.T) {
	t.Parallel()
	var s *metrics.Session
	s.Update("x")
	s.Events(3)
	s.Watchers(1)
	s.ToolStatus("", "pending")
	s.TurnEnded("end_turn", time.Second)
	s.End()
	if in, out := s.AgentIO(); in != nil || out != nil {
		t.Fatal("a nil session has byte counters")
	}
}

// failingStore fails every Append.
type failingStore struct{ statestore.Store }

func (failingStore) Append(context.Context, string, []*encoded.Event, []statestore.Call) error {
	return errors.New("disk on fire")
}

// leasingStore is a store that holds leases (trivially).
type leasingStore struct{ statestore.Store }

func (leasingStore) AcquireLease(context.Context, string, string, time.Duration) error { return nil }
func (leasingStore) ReleaseLease(context.Context, string, string) error                { return nil }
func (leasingStore) LeaseHolder(context.Context, string) (string, error)               { return "", nil }

func TestInstrumentStoreKeepsLeasesAndCountsFailures(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	if _, ok := m.InstrumentStore(leasingStore{statestore.NewMemory(statestore.Options{})}).(statestore.Leaser); !ok {
		t.Fatal("the store is a Leaser; the instrumented one is not")
	}
	st := m.InstrumentStore(failingStore{statestore.NewMemory(statestore.Options{})})
	if _, ok := st.(statestore.Leaser); ok {
		t.Fatal("a store that holds no leases became a Leaser")
	}
	ctx := context.Background()
	if _, err := st.GetSession(ctx, "missing"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("GetSession: %v", err)
	}
	if err := st.Append(ctx, "s", nil, nil); err == nil {
		t.Fatal("Append did not fail")
	}
	want := `
# HELP acp_gateway_store_errors_total State store operations that failed, by operation.
# TYPE acp_gateway_store_errors_total counter
acp_gateway_store_errors_total{operation="append"} 1
`
	// Not found is an answer, not a failure: only the append counts.
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "acp_gateway_store_errors_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.Registry(), "acp_gateway_store_operation_duration_seconds"); n != 2 {
		t.Errorf("latency series: %d, want 2 (get_session, append)", n)
	}
}

func TestASessionHasAtMostNineSeries(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	s := m.StartSession("a", "demo", true)
	s.Update("tool_call_update")
	s.Events(1)
	s.Watchers(1)
	// One call of each status ACP has, and one the agent made up.
	for _, st := range []string{"pending", "in_progress", "completed", "failed", "_custom"} {
		s.ToolStatus("", st)
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "session_id" {
					n++
				}
			}
		}
	}
	if n != 9 {
		t.Fatalf("a session with every tool-call status has %d series, the documented bound is 9", n)
	}
}

func TestUpdatesCountedByAgentAndKind(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	a := m.StartSession("a", "demo", true)
	b := m.StartSession("b", "demo", true)
	for range 3 {
		a.Update("tool_call_update")
	}
	a.Update("agent_message_chunk")
	b.Update("tool_call_update")
	want := `
# HELP acp_gateway_updates_total Session updates received from agents, by agent and update kind.
# TYPE acp_gateway_updates_total counter
acp_gateway_updates_total{agent="demo",kind="agent_message_chunk"} 1
acp_gateway_updates_total{agent="demo",kind="tool_call_update"} 4
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "acp_gateway_updates_total"); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkSessionUpdate(b *testing.B) {
	m := metrics.New(metrics.Options{})
	s := m.StartSession("a", "demo", true)
	for b.Loop() {
		s.Update("tool_call_update")
	}
}

// acp_gateway_build_info carries the build as buildinfo reports it, the
// version command's and the start-up log's.
func TestBuildInfo(t *testing.T) {
	bi := buildinfo.Get()
	want := fmt.Sprintf(`
# HELP acp_gateway_build_info Build of this gateway: always 1, labelled with version, revision and Go version.
# TYPE acp_gateway_build_info gauge
acp_gateway_build_info{goversion=%q,revision=%q,version=%q} 1
`, bi.GoVersion, bi.Revision, bi.Version)
	m := metrics.New(metrics.Options{})
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "acp_gateway_build_info"); err != nil {
		t.Fatal(err)
	}
}
