package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool, failing the test when it is
// missing.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: install Debian's prometheus package, `apt-get install prometheus` " +
			"(scripts/deps.sh does); it checks deploy/prometheus")
	}
	return p
}

// readYAML decodes the YAML file at path, relative to deploy/, into v.
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("deploy/%s: %v", filepath.ToSlash(path), err)
	}
}

// alertRule is a rule of deploy/prometheus/alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var file struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join("prometheus", "alerts.yml"), &file)
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestPrometheus checks deploy/prometheus with promtool: the configuration
// (which loads the rules), the rules, and their unit tests; and that every
// alert has a unit test in which it fires.
func TestPrometheus(t *testing.T) {
	tool := promtool(t)
	for _, args := range [][]string{
		{"check", "config", "prometheus.yml"},
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	rules := alertRules(t)
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name          string `yaml:"name"`
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, filepath.Join("prometheus", "alerts_test.yml"), &tests)
	if !slices.Equal(tests.RuleFiles, []string{"alerts.yml"}) {
		t.Errorf("alerts_test.yml: rule_files %q, want [alerts.yml]", tests.RuleFiles)
	}
	fires := map[string]bool{}
	tested := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			tested[a.Alertname] = true
			fires[a.Alertname] = fires[a.Alertname] || len(a.ExpAlerts) > 0
		}
	}
	var names []string
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		names = append(names, r.Alert)
		if !fires[r.Alert] {
			t.Errorf("alert %s: no test in alerts_test.yml in which it fires", r.Alert)
		}
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s: want summary and description annotations", r.Alert)
		}
	}
	for name := range tested {
		if !slices.Contains(names, name) {
			t.Errorf("alerts_test.yml tests alert %s, which alerts.yml does not have", name)
		}
	}
	// What the issue asks the rules to watch.
	for _, want := range []string{
		`acp_gateway_agent_exits_total{job="acp-gateway", reason=~"failed|killed|protocol_error"}`,
		`acp_gateway_turns_total{job="acp-gateway", stop_reason="error"}`,
		`acp_gateway_streams_cut_off_total{job="acp-gateway"}`,
		`acp_gateway_store_errors_total{job="acp-gateway"}`,
		`up{job="acp-gateway"}`,
	} {
		if !slices.ContainsFunc(rules, func(r alertRule) bool { return r.Alert != "" && strings.Contains(r.Expr, want) }) {
			t.Errorf("no alert on %s", want)
		}
	}
}
