package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// family is what the test knows of an exported metric family.
type family struct {
	typ    dto.MetricType
	labels map[string]bool
}

// exported maps metric family names to what the binary exports.
type exported map[string]family

func (e exported) add(fams map[string]*dto.MetricFamily) {
	for name, f := range fams {
		fam, ok := e[name]
		if !ok {
			fam = family{typ: f.GetType(), labels: map[string]bool{}}
			e[name] = fam
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				fam.labels[l.GetName()] = true
			}
		}
	}
}

// eventOnly are the gateway's metrics that a demo turn cannot produce (a
// labelled family has no series until something happens): streams cut off
// for lagging and store failures. The test takes them from the metrics
// package the binary registers, made to count each once.
var eventOnly = []string{"acp_gateway_streams_cut_off_total", "acp_gateway_store_errors_total"}

// targetLabels are the labels Prometheus adds to every scraped series
// (job, instance) or that deploy/ relabels in (namespace, pod, ...).
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// standard are series Prometheus makes itself for each target.
var standard = exported{"up": {typ: dto.MetricType_GAUGE, labels: map[string]bool{}}}

// liveMetrics runs a real gateway, one demo turn through `acp-gateway try`
// (tool calls, a permission request, streams), and a second session that
// is closed (an agent exit), and returns what its /metrics exports.
func liveMetrics(t *testing.T) exported {
	t.Helper()
	dir := t.TempDir()
	g := startGateway(t, dir, "--store=memory:", "--listen=127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	try := exec.CommandContext(ctx, gatewayBinary(t), "try", "--json", "--url", g.base)
	try.Dir = dir // the session's cwd
	out, err := try.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(`"turnEnded"`)) {
		t.Fatalf("acp-gateway try: %v\n%s\ngateway:\n%s", err, out, g.output())
	}
	client := acpv2connect.NewSessionServiceClient(http.DefaultClient, g.base)
	created, err := client.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "demo", Cwd: dir}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: created.Msg.GetSessionId()})); err != nil {
		t.Fatal(err)
	}
	for {
		code, body, err := get(ctx, g.base+"/metrics")
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", code, err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("parsing /metrics: %v", err)
		}
		if fams["acp_gateway_agent_exits_total"] != nil && fams["acp_gateway_session_tool_calls"] != nil {
			e := exported{}
			e.add(fams)
			return e
		}
		select {
		case <-ctx.Done():
			t.Fatalf("/metrics has no agent exit or per-session series after a turn and a closed session:\n%s", body)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// failingStore fails every ListSessions.
type failingStore struct{ statestore.Store }

func (failingStore) ListSessions(context.Context, string) ([]*statestore.Session, error) {
	return nil, errors.New("the store is down")
}

// eventOnlyMetrics returns the eventOnly families of the metrics package,
// after one event of each.
func eventOnlyMetrics(t *testing.T) exported {
	t.Helper()
	m := metrics.New(metrics.Options{})
	m.CutOff("Watch")
	if _, err := m.InstrumentStore(failingStore{statestore.NewMemory(statestore.Options{})}).ListSessions(context.Background(), ""); err == nil {
		t.Fatal("failingStore did not fail")
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		if slices.Contains(eventOnly, f.GetName()) {
			byName[f.GetName()] = f
		}
	}
	e := exported{}
	e.add(byName)
	for _, name := range eventOnly {
		if _, ok := e[name]; !ok {
			t.Fatalf("the metrics package exports no %s", name)
		}
	}
	return e
}

// resolve finds the family a metric name in PromQL refers to: the family
// itself, or a histogram's _bucket, _sum or _count series. It returns the
// labels the series have.
func (e exported) resolve(name string) (map[string]bool, error) {
	if f, ok := e[name]; ok {
		if f.typ == dto.MetricType_HISTOGRAM {
			return nil, fmt.Errorf("%s is a histogram: query its _bucket, _sum or _count", name)
		}
		return f.labels, nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if f, found := e[base]; ok && found && f.typ == dto.MetricType_HISTOGRAM {
			if suffix != "_bucket" {
				return f.labels, nil
			}
			l := map[string]bool{"le": true}
			for k := range f.labels {
				l[k] = true
			}
			return l, nil
		}
	}
	return nil, fmt.Errorf("the gateway exports no metric %s", name)
}

// query is what one PromQL expression refers to.
type query struct {
	names     []string // metric names of its selectors
	labels    []string // label names in matchers, by/without, on/ignoring
	quantiles []string // metric names inside histogram_quantile
}

var promql = parser.NewParser(parser.Options{})

func parseQuery(expr string) (query, error) {
	node, err := promql.ParseExpr(expr)
	if err != nil {
		return query{}, err
	}
	var q query
	var walkErr error
	parser.Inspect(node, func(n parser.Node, path []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			name := n.Name
			for _, m := range n.LabelMatchers {
				if m.Name == labels.MetricName {
					if name == "" && m.Type == labels.MatchEqual {
						name = m.Value
					}
					continue
				}
				q.labels = append(q.labels, m.Name)
			}
			if name == "" {
				walkErr = fmt.Errorf("selector %s names no metric", n)
				return walkErr
			}
			q.names = append(q.names, name)
			for _, p := range path {
				if c, ok := p.(*parser.Call); ok && c.Func.Name == "histogram_quantile" {
					q.quantiles = append(q.quantiles, name)
				}
			}
		case *parser.AggregateExpr:
			q.labels = append(q.labels, n.Grouping...)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				q.labels = append(q.labels, n.VectorMatching.MatchingLabels...)
				q.labels = append(q.labels, n.VectorMatching.Include...)
			}
		case *parser.Call:
			if n.Func.Name == "label_replace" || n.Func.Name == "label_join" {
				walkErr = fmt.Errorf("%s: the test cannot follow labels it makes", n.Func.Name)
				return walkErr
			}
		}
		return nil
	})
	return q, walkErr
}

// check checks that every metric and label a query names exists.
func (e exported) check(q query) error {
	have := map[string]bool{}
	for _, l := range targetLabels {
		have[l] = true
	}
	for _, name := range q.names {
		ls, err := e.resolve(name)
		if err != nil {
			return err
		}
		for l := range ls {
			have[l] = true
		}
	}
	for _, l := range q.labels {
		if !have[l] {
			return fmt.Errorf("no metric it queries has a label %s", l)
		}
	}
	return nil
}

// grafanaVar is a dashboard variable reference: $name or ${name} or
// ${name:format}.
var grafanaVar = regexp.MustCompile(`\$(?:\{(\w+)(?::\w+)?\}|(\w+))`)

// grafanaBuiltins are Grafana's own variables; the range ones stand for a
// duration in PromQL.
var grafanaBuiltins = map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

// substitute replaces a dashboard query's variables with values PromQL
// parses, and returns the variables it used.
func substitute(expr string) (string, []string) {
	var used []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		m := grafanaVar.FindStringSubmatch(v)
		name := m[1] + m[2]
		used = append(used, name)
		if d, ok := grafanaBuiltins[name]; ok {
			return d
		}
		return "x"
	})
	return out, used
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

// TestMetricNames checks that the Grafana dashboard and the alerting rules
// query only metrics and labels a live gateway exports, and that the
// dashboard shows every gateway metric.
func TestMetricNames(t *testing.T) {
	live := liveMetrics(t)
	known := exported{}
	for name, f := range live {
		known[name] = f
	}
	for name, f := range eventOnlyMetrics(t) {
		known[name] = f
	}
	for name, f := range standard {
		known[name] = f
	}
	for name := range live {
		if slices.Contains(eventOnly, name) {
			t.Logf("%s is in the live scrape: it need not be in eventOnly", name)
		}
	}

	// The alerting rules.
	for _, r := range alertRules(t) {
		q, err := parseQuery(r.Expr)
		if err == nil {
			err = known.check(q)
		}
		if err != nil {
			t.Errorf("alert %s: %v\n%s", r.Alert, err, r.Expr)
		}
	}

	// The dashboard.
	d := readDashboard(t)
	used := map[string]bool{}     // metric names the dashboard queries
	quantile := map[string]bool{} // ... inside histogram_quantile
	session := false              // a query filters on session_id=~"$session_id"
	checkExpr := func(where, expr string) {
		if strings.Contains(expr, `session_id=~"$session_id"`) {
			session = true
		}
		promExpr, _ := substitute(expr)
		q, err := parseQuery(promExpr)
		if err == nil {
			err = known.check(q)
		}
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, expr)
			return
		}
		for _, n := range q.names {
			used[n] = true
		}
		for _, n := range q.quantiles {
			quantile[n] = true
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q: want label_values(SELECTOR, LABEL)", v.Name, q.Query)
			continue
		}
		checkExpr("variable "+v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], m[1]))
	}
	forEachPanel(d.Panels, func(p panel) {
		for _, tg := range p.Targets {
			checkExpr(fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID), tg.Expr)
		}
	})
	if !session {
		t.Error(`no dashboard query drills down by session_id=~"$session_id"`)
	}
	for name, f := range known {
		if !strings.HasPrefix(name, "acp_gateway_") {
			continue
		}
		switch f.typ {
		case dto.MetricType_HISTOGRAM:
			if !quantile[name+"_bucket"] {
				t.Errorf("the dashboard shows no histogram_quantile of %s_bucket", name)
			}
		default:
			if !used[name] {
				t.Errorf("the dashboard does not show %s", name)
			}
		}
	}
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("grafana", "acp-gateway.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("deploy/grafana/acp-gateway.json: %v", err)
	}
	return d
}

func forEachPanel(ps []panel, f func(panel)) {
	for _, p := range ps {
		f(p)
		forEachPanel(p.Panels, f)
	}
}

// TestDashboard checks the dashboard's shape: its variables, data sources,
// panel ids and layout.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and schemaVersion 36 or later", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		if _, dup := vars[v.Name]; dup {
			t.Errorf("variable %s twice", v.Name)
		}
		vars[v.Name] = v.Type
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s: datasource %v, want ${datasource}", v.Name, v.Datasource)
		}
	}
	if vars["datasource"] != "datasource" {
		t.Error("want a datasource variable, so that the dashboard imports into any Grafana")
	}
	if vars["session_id"] != "query" {
		t.Error("want a session_id query variable, for the per-session drill-down")
	}
	ids := map[int]bool{}
	type rect struct {
		id         int
		x, y, w, h int
	}
	var rects []rect
	queries := 0
	forEachPanel(d.Panels, func(p panel) {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.ID <= 0 || ids[p.ID] {
			t.Errorf("%s: id not positive and unique", where)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("%s: gridPos %+v outside the 24 columns", where, g)
		}
		for _, r := range rects {
			if g.X < r.x+r.w && r.x < g.X+g.W && g.Y < r.y+r.h && r.y < g.Y+g.H {
				t.Errorf("%s overlaps panel %d", where, r.id)
			}
		}
		rects = append(rects, rect{p.ID, g.X, g.Y, g.W, g.H})
		if p.Type == "row" {
			return
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s: datasource %v, want ${datasource}", where, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			queries++
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: target %q: want an expr and a unique refId", where, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
				t.Errorf("%s target %s: datasource %v, want ${datasource}", where, tg.RefID, tg.Datasource)
			}
			_, used := substitute(tg.Expr)
			for _, v := range used {
				if _, ok := vars[v]; !ok && grafanaBuiltins[v] == "" {
					t.Errorf("%s target %s: $%s is no variable of the dashboard", where, tg.RefID, v)
				}
			}
		}
	})
	if queries < 20 {
		t.Errorf("%d queries: a thin dashboard", queries)
	}
}
