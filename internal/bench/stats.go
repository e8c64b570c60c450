package bench

import (
	"math"
	"slices"
	"time"
)

// turnResult is what one measured turn gave.
type turnResult struct {
	// Updates counts the agent's updates the client received (each once).
	Updates int `json:"updates"`
	// FirstSend and LastSend are the send stamps of the first and last
	// update received; LastRecv is when the client received the last.
	// Unix nanoseconds.
	FirstSend int64 `json:"firstSend"`
	LastSend  int64 `json:"lastSend"`
	LastRecv  int64 `json:"lastRecv"`
	// Samples are the updates' latencies, agent write to client receive,
	// in nanoseconds.
	Samples []int64 `json:"samples"`
	// CPU is the measured process's CPU time during the turn.
	CPU time.Duration `json:"cpu"`
	// CutOffs counts the streams the gateway cut off for lagging (each
	// resumed with Watch).
	CutOffs int `json:"cutOffs"`
}

// tracker follows the updates of one turn on one stream.
type tracker struct {
	r    turnResult
	last int64 // the number of the last update seen
}

// see records update n sent at t, received at recv. Repeats (the merged
// tool_call event carries the stamp of the update that changed it) are
// ignored.
func (k *tracker) see(n, t, recv int64) {
	if n <= k.last {
		return
	}
	k.last = n
	if k.r.Updates == 0 || t < k.r.FirstSend {
		k.r.FirstSend = t
	}
	k.r.LastSend = max(k.r.LastSend, t)
	k.r.LastRecv = recv
	k.r.Updates++
	k.r.Samples = append(k.r.Samples, recv-t)
}

// Latency is a latency distribution, in milliseconds.
type Latency struct {
	Samples int     `json:"samples"`
	P50     float64 `json:"p50"`
	P99     float64 `json:"p99"`
	P999    float64 `json:"p999"`
	Max     float64 `json:"max"`
}

// latencyOf summarises samples (nanoseconds); it sorts them.
func latencyOf(samples []int64) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(samples)))) - 1
		i = min(max(i, 0), len(samples)-1)
		return ms(samples[i])
	}
	return Latency{Samples: len(samples), P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: ms(samples[len(samples)-1])}
}

func ms(ns int64) float64 { return math.Round(float64(ns)/1e3) / 1e3 }

// summary aggregates turns: updates per second over the turns' spans
// (first send to last receive), latency, CPU per 1,000 updates.
type summary struct {
	updates int
	span    time.Duration
	cpu     time.Duration
	samples []int64
	cutOffs int
}

func (s *summary) add(r turnResult) {
	s.updates += r.Updates
	if r.Updates > 0 {
		s.span += time.Duration(r.LastRecv - r.FirstSend)
	}
	s.cpu += r.CPU
	s.samples = append(s.samples, r.Samples...)
	s.cutOffs += r.CutOffs
}

func (s *summary) rate() float64 {
	if s.span <= 0 {
		return 0
	}
	return float64(s.updates) / s.span.Seconds()
}

func (s *summary) cpuPer1000() float64 {
	if s.updates == 0 {
		return 0
	}
	return round3(s.cpu.Seconds() / float64(s.updates) * 1000)
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
