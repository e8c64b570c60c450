package testutil

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// MetricSum sums the samples of metric name in g (a counter's or a
// gauge's value, a histogram's sample count) that carry every label given
// as "name=value"; it fails the test when g cannot be gathered.
func MetricSum(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				// One of the three is set; the others' getters give 0.
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// hasLabels reports whether m carries every "name=value" label.
func hasLabels(m *dto.Metric, labels []string) bool {
	for _, want := range labels {
		k, v, _ := strings.Cut(want, "=")
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
			return false
		}
	}
	return true
}
