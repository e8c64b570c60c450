package bench

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/acp-gateway/acp-gateway/gateway/sandbox"
)

// Report is the result of a bench run; --json writes it.
type Report struct {
	Machine Machine        `json:"machine"`
	Config  Config         `json:"config"`
	Paths   []PathResult   `json:"paths"`
	Fanout  []FanoutResult `json:"fanout"`
	// Scale is the scale phase with its agents unconfined; ScaleSandbox
	// the same with each agent in a bubblewrap sandbox under the default
	// limits (Config.ScaleSandbox picks which run).
	Scale        *ScaleResult `json:"scale,omitempty"`
	ScaleSandbox *ScaleResult `json:"scaleSandbox,omitempty"`
	// Rate are the many-sessions phase's steps (Config.RateSessions).
	Rate []RateResult `json:"rate,omitempty"`
	// Bombs are the bombs phase's runs, one per throttle setting
	// (Config.BombThrottle).
	Bombs []BombsResult `json:"bombs,omitempty"`
	// Leftover counts processes of this run (agents, readers, gateways)
	// still alive at the end; they were killed.
	Leftover int     `json:"leftoverProcesses"`
	Seconds  float64 `json:"seconds"`
	Headline string  `json:"headline"`
}

// Machine describes where the bench ran.
type Machine struct {
	CPU        string `json:"cpu"`
	CPUs       int    `json:"cpus"`
	MemoryMiB  int64  `json:"memoryMiB"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	Websocketd string `json:"websocketd,omitempty"`
}

func machine(websocketd string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if mem, err := kBField("/proc/meminfo", "MemTotal"); err == nil {
		m.MemoryMiB = mem >> 20
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if websocketd != "" {
		if out, err := exec.Command(websocketd, "--version").Output(); err == nil {
			m.Websocketd = strings.TrimSpace(string(out))
		}
	}
	return m
}

// PathResult is the measurement of one path.
type PathResult struct {
	Name string `json:"name"`
	// Key is the --paths name.
	Key string `json:"key"`
	// Gateway is set for the gateway's paths.
	Gateway  bool   `json:"gateway"`
	Store    string `json:"store,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Present  bool   `json:"present"`
	// Absent says why a path was not measured.
	Absent string `json:"absent,omitempty"`
	Error  string `json:"error,omitempty"`
	// Measured names the process whose CPU and RSS are reported.
	Measured string `json:"measured,omitempty"`
	// Updates and UpdatesPerSecond are of the as-fast-as-possible turns:
	// updates over the summed spans from the first update's send to the
	// last update's receipt.
	Updates          int     `json:"updates"`
	UpdatesPerSecond float64 `json:"updatesPerSecond"`
	// Latency is agent write to client receive at the paced rate;
	// FloodLatency is the same during the as-fast-as-possible turns.
	Latency      Latency `json:"latencyMs"`
	FloodLatency Latency `json:"floodLatencyMs"`
	// CPUPer1000 is the measured process's CPU seconds per 1,000 updates,
	// over the as-fast-as-possible turns.
	CPUPer1000 float64 `json:"cpuSecondsPer1000Updates"`
	// PeakRSS is the measured process's peak resident set during the path.
	PeakRSS int64 `json:"peakRssBytes"`
	// AllocBytesPerUpdate and AllocsPerUpdate are the heap bytes and
	// objects the gateway process allocated per update over the
	// as-fast-as-possible turns (runtime.MemStats TotalAlloc and Mallocs);
	// gateway paths only.
	AllocBytesPerUpdate float64 `json:"allocBytesPerUpdate,omitempty"`
	AllocsPerUpdate     float64 `json:"allocsPerUpdate,omitempty"`
	CutOffs             int     `json:"cutOffs"`
	// RoundRates are UpdatesPerSecond in each round, in order (0 for a
	// round that failed); the rest of the result is the median round's.
	RoundRates []float64 `json:"roundUpdatesPerSecond,omitempty"`
	// RoundP99s are Latency.P99 in each round, in order.
	RoundP99s []float64 `json:"roundP99Ms,omitempty"`
	// VsPipe and VsWebsocketd compare with the baselines: throughput
	// ratio, and p99 latency difference in milliseconds.
	VsPipe       *Ratio `json:"vsPipe,omitempty"`
	VsWebsocketd *Ratio `json:"vsWebsocketd,omitempty"`

	client string // the client protocol of a gateway path
}

// Ratio compares a path with a baseline. With several rounds, each figure
// is the median over the rounds of the path and the baseline measured in
// the same round (minutes apart at most), rather than a comparison of the
// two medians, which may come from rounds far apart on a machine whose
// speed drifts.
type Ratio struct {
	// Throughput is updates/s over the baseline's.
	Throughput float64 `json:"throughput"`
	// P99 is p99 latency over the baseline's; P99DeltaMs their difference.
	P99        float64 `json:"p99"`
	P99DeltaMs float64 `json:"p99DeltaMs"`
	// RoundThroughputs and RoundP99DeltasMs are the round by round
	// figures the medians are taken of.
	RoundThroughputs []float64 `json:"roundThroughputs,omitempty"`
	RoundP99DeltasMs []float64 `json:"roundP99DeltasMs,omitempty"`
}

func ratio(p, base *PathResult) *Ratio {
	if base == nil || !base.Present || base.Error != "" || base.UpdatesPerSecond == 0 || !p.Present || p.Error != "" {
		return nil
	}
	r := &Ratio{Throughput: round3(p.UpdatesPerSecond / base.UpdatesPerSecond), P99DeltaMs: round3(p.Latency.P99 - base.Latency.P99)}
	if base.Latency.P99 > 0 {
		r.P99 = round3(p.Latency.P99 / base.Latency.P99)
	}
	if len(p.RoundRates) < 2 {
		return r
	}
	var p99s []float64
	for i, v := range p.RoundRates {
		// A path's RoundP99s are as many as its RoundRates (medianPaths).
		if i >= len(base.RoundRates) || base.RoundRates[i] <= 0 || v <= 0 {
			continue
		}
		r.RoundThroughputs = append(r.RoundThroughputs, round3(v/base.RoundRates[i]))
		r.RoundP99DeltasMs = append(r.RoundP99DeltasMs, round3(p.RoundP99s[i]-base.RoundP99s[i]))
		if base.RoundP99s[i] > 0 {
			p99s = append(p99s, round3(p.RoundP99s[i]/base.RoundP99s[i]))
		}
	}
	if len(r.RoundThroughputs) > 0 {
		r.Throughput, r.P99DeltaMs = median(r.RoundThroughputs), median(r.RoundP99DeltasMs)
	}
	if len(p99s) > 0 {
		r.P99 = median(p99s)
	}
	return r
}

// median returns the middle of vs (the mean of the two middles of an even
// count).
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return round3((s[n/2-1] + s[n/2]) / 2)
}

// medianPaths gives each path of rounds (the results of each round) its
// median round: of the path's rounds, sorted by updates/s, the middle one
// (the lower of two), whole, so that its latency, CPU and memory are those
// of one round. A path that failed in a round reports that failure. Each
// result records every round's updates/s and p99 in RoundRates and
// RoundP99s.
func medianPaths(rounds [][]PathResult) []PathResult {
	if len(rounds) == 0 {
		return nil
	}
	var out []PathResult
	for _, first := range rounds[0] {
		var all []PathResult
		var rates, p99s []float64
		for _, r := range rounds {
			for _, p := range r {
				if p.Key == first.Key {
					all = append(all, p)
					rates = append(rates, p.UpdatesPerSecond)
					p99s = append(p99s, p.Latency.P99)
				}
			}
		}
		var pick PathResult
		if i := slices.IndexFunc(all, func(p PathResult) bool { return p.Error != "" || !p.Present }); i >= 0 {
			pick = all[i]
		} else {
			slices.SortStableFunc(all, func(a, b PathResult) int { return cmp.Compare(a.UpdatesPerSecond, b.UpdatesPerSecond) })
			pick = all[(len(all)-1)/2]
		}
		pick.RoundRates, pick.RoundP99s = rates, p99s
		out = append(out, pick)
	}
	return out
}

func (r *Report) path(key string) *PathResult {
	for i := range r.Paths {
		if r.Paths[i].Key == key {
			return &r.Paths[i]
		}
	}
	return nil
}

// finish computes the ratios and the headline.
func (r *Report) finish() {
	pipe, wsd := r.path("pipe"), r.path("websocketd")
	for i := range r.Paths {
		p := &r.Paths[i]
		if p.Gateway {
			p.VsPipe, p.VsWebsocketd = ratio(p, pipe), ratio(p, wsd)
		}
	}
	var parts []string
	// The default configuration first (serve's bolt store, Connect binary
	// and JSON), then the memory store's binary path for comparison.
	for _, h := range headlinePaths {
		if p := r.path(h.key); p != nil && p.Present && p.Error == "" {
			parts = append(parts, pathHeadline(h.label, p, wsd)...)
		}
	}
	if n := len(r.Fanout); n > 0 {
		f := r.Fanout[n-1]
		if f.Error == "" && f.AgentVsOne > 0 {
			part := fmt.Sprintf("%d watchers: agent at %.0f upd/s (%.2fx its 1-watcher rate), delivered p50 %.0f / p99 %.0f ms, %d cut off",
				f.Watchers, f.AgentRate, f.AgentVsOne, f.Latency.P50, f.Latency.P99, f.CutOffs)
			if f.CPUPer1000 > 0 && f.WatchersCPUPer1000 > 0 {
				// What bounds delivery: the clients' reading, when it
				// takes more CPU than the gateway's sending.
				part += fmt.Sprintf(", the watchers (nice %d) taking %.2fx the gateway's CPU", f.WatchersNice, f.WatchersCPUPer1000/f.CPUPer1000)
			}
			parts = append(parts, part)
		}
	}
	s := r.Scale
	if s == nil {
		s = r.ScaleSandbox
	}
	if s != nil && s.Error == "" {
		parts = append(parts, fmt.Sprintf("%.1f KiB per idle session, heap in use and stacks, %s store (target < 64 KiB)",
			(s.HeapPerSession+s.StackPerSession)/1024, s.Store))
	}
	var firsts []string
	for _, s := range []*ScaleResult{r.Scale, r.ScaleSandbox} {
		switch {
		case s == nil:
		case s.Error != "" && s.CreateToFirstEvent.Samples == 0:
			firsts = append(firsts, scaleLabel(s.Sandbox)+" failed")
		default:
			firsts = append(firsts, fmt.Sprintf("%s p50 %.0f / p99 %.0f ms", scaleLabel(s.Sandbox), s.CreateToFirstEvent.P50, s.CreateToFirstEvent.P99))
		}
	}
	if len(firsts) > 0 {
		parts = append(parts, "create to first event "+strings.Join(firsts, ", "))
	}
	if n := len(r.Rate); n > 0 {
		last := r.Rate[n-1]
		s := fmt.Sprintf("%d sessions at %g upd/s each (%s, connect+json): ", last.Sessions, last.PerSecond, last.Store)
		if last.Error != "" && last.Latency.Samples == 0 {
			s += "failed"
		} else {
			s += fmt.Sprintf("p99 %.1f ms (target < %d ms), %d cut off, %.2f%% of a CPU and %s RSS per session", last.Latency.P99, RateTargetP99Ms,
				last.CutOffs, last.CPUPerSession*100, fmtBytes(last.RSSPerSession))
		}
		parts = append(parts, s+"; "+rateVerdict(r.Rate))
	}
	for _, b := range r.Bombs {
		if b.Error != "" {
			parts = append(parts, fmt.Sprintf("bombs (throttle %s) failed", b.Throttle))
			continue
		}
		met := "met"
		if !b.Met() {
			met = "NOT met"
		}
		parts = append(parts, fmt.Sprintf("%d bombs (throttle %s): another user's p50 %.2fx GetSession, %.2fx Prompt turn (target <= %.0fx: %s)",
			b.Bombers, b.Throttle, b.GetP50Ratio, b.TurnP50Ratio, bombTarget, met))
	}
	if len(parts) == 0 {
		parts = append(parts, "no gateway path measured")
	}
	r.Headline = "headline: " + strings.Join(parts, "; ")
}

// headlinePaths are the paths the headline quotes, in order: serve's
// default configuration (the bolt store) with a Connect binary and a
// Connect JSON client, then the memory store's binary path, the
// headline's until issue 25, for comparison.
var headlinePaths = []struct{ key, label string }{
	{"bolt", "gateway (bolt, connect+proto)"},
	{"boltjson", "gateway (bolt, connect+json)"},
	{"proto", "for comparison, gateway (memory, connect+proto)"},
}

// pathHeadline is the headline's part for path p: its rate against
// websocketd (wsd) and the pipe, round by round, its p99 against
// websocketd's, and its cut-offs.
func pathHeadline(label string, p, wsd *PathResult) []string {
	s := fmt.Sprintf("%s %.0f upd/s", label, p.UpdatesPerSecond)
	if p.VsWebsocketd != nil {
		s += fmt.Sprintf(" = %.2fx websocketd", p.VsWebsocketd.Throughput)
		if rt := p.VsWebsocketd.RoundThroughputs; len(rt) > 1 {
			each := make([]string, len(rt))
			for i, v := range rt {
				each[i] = fmt.Sprintf("%.2fx", v)
			}
			s += " (median of rounds " + strings.Join(each, ", ") + ")"
		}
	} else {
		s += " (websocketd absent)"
	}
	if p.VsPipe != nil {
		s += fmt.Sprintf(", %.2fx pipe", p.VsPipe.Throughput)
	}
	parts := []string{s}
	switch {
	case p.VsWebsocketd == nil:
		parts = append(parts, fmt.Sprintf("p99 %.2f ms", p.Latency.P99))
	case len(p.VsWebsocketd.RoundP99DeltasMs) > 1:
		d := p.VsWebsocketd.RoundP99DeltasMs
		each := make([]string, len(d))
		for i, v := range d {
			each[i] = fmt.Sprintf("%+.2f", v)
		}
		parts = append(parts, fmt.Sprintf("p99 %+.2f ms vs websocketd (median of rounds %s ms; target <= +1 ms)", p.VsWebsocketd.P99DeltaMs, strings.Join(each, ", ")))
	default:
		parts = append(parts, fmt.Sprintf("p99 %.2f ms vs websocketd %.2f ms (%+.2f ms; target <= +1 ms)", p.Latency.P99, wsd.Latency.P99, p.VsWebsocketd.P99DeltaMs))
	}
	if p.CutOffs > 0 {
		parts[len(parts)-1] += fmt.Sprintf(", %d streams cut off (target 0)", p.CutOffs)
	}
	return parts
}

func fmtBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

func fmtRatio(r *Ratio) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", r.Throughput)
}

// Write writes the report as text; its last line is the headline.
func (r *Report) Write(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "\nacp-gateway-bench: %d CPUs (%s), %d MiB, %s, %s\n", m.CPUs, m.CPU, m.MemoryMiB, m.Kernel, m.Go)
	c := r.Config
	fmt.Fprintf(w, "workload: ACP v%s agents, payload %d B; %d updates per path as fast as possible; latency at %.0f updates/s (%d updates)\n",
		joinInts(c.Mix, "+v"), c.Payload, c.Updates, c.Rate, c.PacedUpdates)
	fmt.Fprintf(w, "CPU and peak RSS: of the pipe reader (getrusage), the websocketd process and the gateway process (a child: its threads' on-CPU time in /proc); agents and clients excluded\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tupdates/s\tp50 ms\tp99 ms\tp99.9 ms\tflood p99 ms\tCPU s/1k upd\tpeak RSS\theap alloc/upd\tvs pipe\tvs websocketd\t")
	var notes []string
	for _, p := range r.Paths {
		switch {
		case !p.Present:
			fmt.Fprintf(tw, "%s\tabsent\t\t\t\t\t\t\t\t\t\t\n", p.Name)
			notes = append(notes, fmt.Sprintf("%s: absent: %s", p.Name, p.Absent))
			continue
		case p.Error != "":
			fmt.Fprintf(tw, "%s\tfailed\t\t\t\t\t\t\t\t\t\t\n", p.Name)
			notes = append(notes, fmt.Sprintf("%s: failed: %s", p.Name, firstLine(p.Error)))
			continue
		}
		name := p.Name
		if p.CutOffs > 0 {
			name += fmt.Sprintf(" (%d cut-offs)", p.CutOffs)
		}
		alloc := "-"
		if p.AllocsPerUpdate > 0 {
			alloc = fmt.Sprintf("%s (%.0f objects)", fmtBytes(p.AllocBytesPerUpdate), p.AllocsPerUpdate)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%.3f\t%.3f\t%.2f\t%.3f\t%s\t%s\t%s\t%s\t\n", name, p.UpdatesPerSecond,
			p.Latency.P50, p.Latency.P99, p.Latency.P999, p.FloodLatency.P99, p.CPUPer1000, fmtBytes(float64(p.PeakRSS)),
			alloc, fmtRatio(p.VsPipe), fmtRatio(p.VsWebsocketd))
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(w, "  "+n)
	}
	if len(r.Fanout) > 0 {
		fmt.Fprintf(w, "\nfan-out: one session (gateway, memory store), a %d-update turn as fast as possible, N Watch streams (connect+proto, h2c) besides the Prompt stream\n\n", c.FanoutUpdates)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "watchers\tagent upd/s\tvs 1 watcher\tagent run/CPU wait/blocked %\tdelivered upd/s\tp50 ms\tp99 ms\tp99.9 ms\tcut-offs\tCPU s/1k delivered\twatchers CPU s/1k\t")
		for _, f := range r.Fanout {
			if f.Error != "" {
				fmt.Fprintf(tw, "%d\tfailed: %s\t\t\t\t\t\t\t\t\t\t\n", f.Watchers, firstLine(f.Error))
				continue
			}
			vsOne := "-"
			if f.AgentVsOne > 0 {
				vsOne = fmt.Sprintf("%.2f", f.AgentVsOne)
			}
			fmt.Fprintf(tw, "%d\t%.0f\t%s\t%.0f / %.0f / %.0f\t%.0f\t%.3f\t%.3f\t%.3f\t%d\t%.3f\t%.3f\t\n", f.Watchers, f.AgentRate, vsOne,
				f.AgentRunPct, f.AgentCPUWaitPct, f.AgentBlockedPct, f.DeliveredRate,
				f.Latency.P50, f.Latency.P99, f.Latency.P999, f.CutOffs, f.CPUPer1000, f.WatchersCPUPer1000)
		}
		tw.Flush()
	}
	for _, s := range []*ScaleResult{r.Scale, r.ScaleSandbox} {
		if s != nil {
			s.write(w)
		}
	}
	if r.Scale != nil && r.ScaleSandbox != nil {
		fmt.Fprintf(w, "\ncreate to first event, without and with the sandbox (CreateSession to the first update of the first Prompt, %d sessions, %d at a time)\n\n", r.Scale.Sessions, r.Scale.Concurrency)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "agents\tp50 ms\tp99 ms\tmax ms\tsessions\tfailed\t")
		var notes []string
		for _, s := range []*ScaleResult{r.Scale, r.ScaleSandbox} {
			name := scaleLabel(s.Sandbox) + " (" + s.flags() + ")"
			if s.Error != "" && s.CreateToFirstEvent.Samples == 0 {
				fmt.Fprintf(tw, "%s\tfailed\t\t\t\t\t\n", name)
				notes = append(notes, name+": failed: "+firstLine(s.Error))
				continue
			}
			l := s.CreateToFirstEvent
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%d\t%d\t\n", name, l.P50, l.P99, l.Max, l.Samples, s.Failed)
		}
		tw.Flush()
		for _, n := range notes {
			fmt.Fprintln(w, "  "+n)
		}
		a, b := r.Scale.CreateToFirstEvent, r.ScaleSandbox.CreateToFirstEvent
		if a.Samples > 0 && b.Samples > 0 {
			fmt.Fprintf(w, "  the sandbox adds %+.1f ms at p50, %+.1f ms at p99\n", b.P50-a.P50, b.P99-a.P99)
		}
	}
	if len(r.Rate) > 0 {
		writeRate(w, r.Config, r.Rate)
	}
	for i := range r.Bombs {
		r.Bombs[i].write(w)
	}
	fmt.Fprintf(w, "\nprocesses of this run left at the end: %d; took %.1fs\n", r.Leftover, r.Seconds)
	fmt.Fprintln(w, r.Headline)
}

// write writes the scale phase's results.
func (s *ScaleResult) write(w io.Writer) {
	agents := "agents unconfined"
	if s.Sandbox == sandbox.ModeBwrap {
		agents = "agents in bwrap sandboxes, network " + s.Network
		if s.Limits != "" {
			agents += ", under " + s.Limits
		}
	}
	fmt.Fprintf(w, "\nscale: %d sessions (%d created at a time), %d-update turns, %s store, %s\n", s.Sessions, s.Concurrency, s.UpdatesPerTurn, s.Store, agents)
	if s.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", firstLine(s.Error))
		if s.CreateToFirstEvent.Samples == 0 {
			return
		}
	}
	fmt.Fprintf(w, "  gateway memory per idle session (after one turn): heap in use %s (live objects %s), stacks %s, RSS %s, %.1f goroutines, %.1f OS threads\n",
		fmtBytes(s.HeapPerSession), fmtBytes(s.LivePerSession), fmtBytes(s.StackPerSession), fmtBytes(s.RSSPerSession), s.GoroutinesPerSession, s.ThreadsPerSession)
	fmt.Fprintf(w, "  a further turn adds %s of heap in use per session (its merged tool calls; its events too in the memory store): a session without them is about %s\n",
		fmtBytes(s.HeapPerTurn), fmtBytes(s.HeapPerSession-s.HeapPerTurn))
	fmt.Fprintf(w, "  create to first event: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", s.CreateToFirstEvent.P50, s.CreateToFirstEvent.P99, s.CreateToFirstEvent.Max)
	fmt.Fprintf(w, "  all %d sessions in a turn at once: %.0f updates/s, latency p50 %.1f ms, p99 %.1f ms; %d cut-offs, %d failed, %d children left\n",
		s.Sessions, s.ConcurrentRate, s.ConcurrentLatency.P50, s.ConcurrentLatency.P99, s.CutOffs, s.Failed, s.Leftover)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}
