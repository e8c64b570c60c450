package testutil

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
	samples:
		for _, m := range f.GetMetric() {
			for _, want := range labels {
				k, v, _ := strings.Cut(want, "=")
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == k && l.GetValue() == v
				}
				if !found {
					continue samples
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
