package testutil

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"rpc", "status"})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})
	reg.MustRegister(g, c, h)
	g.WithLabelValues("Watch", "ok").Set(2)
	g.WithLabelValues("Watch", "failed").Set(3)
	g.WithLabelValues("Prompt", "ok").Set(5)
	c.Add(7)
	h.Observe(1)
	h.Observe(2)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"g", nil, 10},
		{"g", []string{"rpc=Watch"}, 5},
		{"g", []string{"rpc=Watch", "status=ok"}, 2},
		{"g", []string{"rpc=Nope"}, 0},
		{"c", nil, 7},
		{"h", nil, 2},
		{"missing", nil, 0},
	} {
		if got := MetricSum(t, reg, tc.name, tc.labels...); got != tc.want {
			t.Errorf("MetricSum(%s, %q) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}
