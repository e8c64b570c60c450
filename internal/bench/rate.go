package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// RateTargetP99Ms is the many-sessions phase's latency target (issue 25):
// agent write to client receive, p99, under 50 ms.
const RateTargetP99Ms = 50

// RateResult is one step of the many-sessions phase: Sessions sessions
// on serve's default store (bolt), each agent writing PerSecond updates a
// second for Seconds (LLM token pace), each read by a Connect JSON client
// of its own (a Prompt stream over a connection of its own).
type RateResult struct {
	Sessions  int     `json:"sessions"`
	PerSecond float64 `json:"updatesPerSecondPerSession"`
	Seconds   float64 `json:"seconds"`
	// Store is the gateway's store: bolt (serve's default) unless
	// Config.RateStore says memory.
	Store string `json:"store"`
	// Updates counts the updates the clients received, each once;
	// Expected those the agents were to write.
	Updates  int `json:"updates"`
	Expected int `json:"expectedUpdates"`
	// DeliveredRate is Updates over the span from the first prompt to the
	// last turn's end.
	DeliveredRate float64 `json:"deliveredUpdatesPerSecond"`
	// Latency is agent write to client receive over every update of every
	// session.
	Latency Latency `json:"latencyMs"`
	CutOffs int     `json:"cutOffs"`
	Failed  int     `json:"failedSessions"`
	// GatewayCores is the gateway process's CPU time over the turns' span,
	// in CPUs; CPUPerSession the same per session, as a share of one CPU
	// (0.01 is 1% of a core).
	GatewayCores  float64 `json:"gatewayCores"`
	CPUPerSession float64 `json:"cpuPerSession"`
	// GatewayCPUWait is the time the gateway's threads were runnable but
	// waited for a CPU over the turns' span, in CPUs: the host's share of
	// the latency, not the gateway's.
	GatewayCPUWait float64 `json:"gatewayCpuWait"`
	// AgentsCores and BenchCores are the CPU time, in CPUs over the same
	// span, of the gateway's agents (the bench's stand-ins, one process
	// per session) and of the bench's own process (the clients): what the
	// host spent beside the gateway to run the workload.
	AgentsCores float64 `json:"agentsCores"`
	BenchCores  float64 `json:"benchCores"`
	// RSSPerSession is the gateway's peak resident set during the turns
	// less its resident set before the first session, over Sessions: an
	// idle session and a running turn's share of the buffers.
	RSSPerSession float64 `json:"rssBytesPerSession"`
	PeakRSS       int64   `json:"peakRssBytes"`
	// Met says whether the step meets the target: p99 under
	// RateTargetP99Ms, no cut-off, no failed session.
	Met bool `json:"met"`
	// Leftover counts the gateway's child processes alive after it shut
	// down (its own count).
	Leftover int    `json:"leftoverChildren"`
	Error    string `json:"error,omitempty"`
}

// rateFDsPerSession is a generous count of the file descriptors one
// session of the phase holds in the gateway (the agent's three pipes and
// pidfd, the client's connection) and in the bench (its connection).
const rateFDsPerSession = 8

// raiseNoFile raises this process's RLIMIT_NOFILE soft limit to its hard
// limit (Go's runtime does so at start too; children get the original
// back) and returns an error when even that is below need.
func raiseNoFile(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) // where allowed
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if lim.Cur < need {
		return fmt.Errorf("RLIMIT_NOFILE is %d, the phase needs about %d open files (raise the hard limit: ulimit -Hn)", lim.Cur, need)
	}
	return nil
}

// runRate runs the many-sessions phase: a step for each count of
// cfg.RateSessions, in order, each on a gateway and a bolt file of its
// own, until one misses the target (the steps after it would too). The
// step profiled (with profile flags) is the last of the list.
func runRate(ctx context.Context, self []string, runID string, tr *transports, cfg *Config, cwd, tmp string, profile func() []string, say func(string, ...any)) []RateResult {
	var out []RateResult
	for i, n := range cfg.RateSessions {
		if ctx.Err() != nil {
			break
		}
		var prof []string
		if i == len(cfg.RateSessions)-1 {
			prof = profile()
		}
		say("rate: %d sessions, %g updates/s each for %s, %s store, a Connect JSON client each", n, cfg.RatePerSession, cfg.RateDuration, cfg.RateStore)
		storeURL := "memory:"
		if cfg.RateStore == "bolt" {
			storeURL = "bolt:" + filepath.Join(tmp, fmt.Sprintf("rate-%d.db", n))
		}
		r := rateStep(ctx, self, runID, tr, cfg, n, cwd, storeURL, prof, say)
		say("rate: %s", r)
		out = append(out, r)
		if !r.Met && i < len(cfg.RateSessions)-1 {
			say("rate: %d sessions miss the target; the larger steps are not run", n)
			break
		}
	}
	return out
}

// rateStep runs one step of the many-sessions phase with n sessions.
func rateStep(ctx context.Context, self []string, runID string, tr *transports, cfg *Config, n int, cwd, storeURL string, profile []string, say func(string, ...any)) (res RateResult) {
	per := int(cfg.RatePerSession * cfg.RateDuration.Seconds())
	res = RateResult{Sessions: n, PerSecond: cfg.RatePerSession, Seconds: cfg.RateDuration.Seconds(), Store: cfg.RateStore, Expected: n * per}
	if err := raiseNoFile(uint64(n*rateFDsPerSession + 256)); err != nil {
		res.Error = err.Error()
		return res
	}
	g, err := startGateway(ctx, self, runID, storeURL, profile...)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer g.stopInto(tr, &res.Leftover, &res.Error)
	ctx, cancel := context.WithTimeout(ctx, cfg.RateDuration+10*time.Minute)
	defer cancel()
	c := tr.client(protoConnectJSON, g.base, false)
	before, err := g.warmUp(ctx, c, cwd)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		res.Failed++
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	// The sessions, created ScaleConcurrency at a time: their agents start.
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, cfg.ScaleConcurrency))
	created := time.Now()
	for i := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agentName(cfg.Mix[i%len(cfg.Mix)]), Cwd: cwd}))
			if err != nil {
				fail(fmt.Errorf("CreateSession: %w", err))
				return
			}
			ids[i] = r.Msg.GetSessionId()
		}(i)
	}
	wg.Wait()
	say("rate: %d sessions created in %.1fs (%d failed)", n, time.Since(created).Seconds(), res.Failed)

	// Every session's turn at once, their starts spread over one second
	// so that the agents' ticks are not in step.
	stopProfile := g.profileWhile(ctx, len(profile) > 0, say)
	resetPeakRSS(g.pid)
	w := Workload{Updates: per, Payload: cfg.Payload, Rate: cfg.RatePerSession}
	results := make([]turnResult, n)
	run0, wait0, _ := schedstat(g.pid)
	agents0, self0 := descendantsCPU(g.pid), selfCPU()
	start := time.Now()
	for i, id := range ids {
		if id == "" {
			continue
		}
		wg.Add(1)
		go func(i int, id string) {
			defer wg.Done()
			select {
			case <-time.After(time.Duration(i) * time.Second / time.Duration(n)):
			case <-ctx.Done():
				return
			}
			r, err := promptTurn(ctx, c, id, w, nil)
			if err == nil && r.Updates != per {
				err = fmt.Errorf("received %d of %d updates", r.Updates, per)
			}
			if err != nil {
				fail(fmt.Errorf("session %s: %w", id, err))
			}
			results[i] = r
		}(i, id)
	}
	wg.Wait()
	span := time.Since(start)
	run1, wait1, _ := schedstat(g.pid)
	agents1, self1 := descendantsCPU(g.pid), selfCPU()
	res.PeakRSS, _ = procStatus(g.pid, "VmHWM")
	stopProfile()

	var samples []int64
	for _, r := range results {
		res.Updates += r.Updates
		res.CutOffs += r.CutOffs
		samples = append(samples, r.Samples...)
	}
	res.Latency = latencyOf(samples)
	if span > 0 {
		res.DeliveredRate = round3(float64(res.Updates) / span.Seconds())
		res.GatewayCores = round3((run1 - run0).Seconds() / span.Seconds())
		res.GatewayCPUWait = round3((wait1 - wait0).Seconds() / span.Seconds())
		res.AgentsCores = round3(cpuOver(agents0, agents1).Seconds() / span.Seconds())
		res.BenchCores = round3((self1 - self0).Seconds() / span.Seconds())
		res.CPUPerSession = (run1 - run0).Seconds() / span.Seconds() / float64(n)
	}
	res.RSSPerSession = float64(res.PeakRSS-before.RSS) / float64(n)
	if firstErr != nil {
		res.Error = firstErr.Error()
	}
	res.Met = res.Error == "" && res.Latency.Samples > 0 && res.Latency.P99 < RateTargetP99Ms && res.CutOffs == 0 && res.Failed == 0
	return res
}

func (r RateResult) String() string {
	if r.Error != "" && r.Latency.Samples == 0 {
		return fmt.Sprintf("%d sessions: failed: %s", r.Sessions, firstLine(r.Error))
	}
	return fmt.Sprintf("%d sessions: %d of %d updates, p50 %.1f ms, p99 %.1f ms, %d cut-offs, %d failed, gateway %.2f CPUs (waited %.2f), agents %.2f CPUs, bench %.2f CPUs, %.2f%% of a CPU per session, %s RSS per session",
		r.Sessions, r.Updates, r.Expected, r.Latency.P50, r.Latency.P99, r.CutOffs, r.Failed, r.GatewayCores, r.GatewayCPUWait, r.AgentsCores, r.BenchCores, r.CPUPerSession*100, fmtBytes(r.RSSPerSession))
}

// rateScale is the largest step that met the target, and whether a step
// missed it: how far the phase scales on this machine.
func rateScale(steps []RateResult) (largest int, missed bool) {
	for _, r := range steps {
		if r.Met {
			largest = max(largest, r.Sessions)
		} else {
			missed = true
		}
	}
	return largest, missed
}

// writeRate writes the many-sessions phase's table.
func writeRate(w io.Writer, c Config, steps []RateResult) {
	fmt.Fprintf(w, "\nmany sessions at a realistic rate: each agent %g updates/s for %s (v%s, mixed message chunks and tool-call updates), %s store, a Connect JSON client (HTTP/1.1) per session; target p99 < %d ms, 0 cut-offs\n\n",
		c.RatePerSession, c.RateDuration, joinInts(c.Mix, "+v"), c.RateStore, RateTargetP99Ms)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sessions\tupdates\tdelivered upd/s\tp50 ms\tp99 ms\tp99.9 ms\tmax ms\tcut-offs\tfailed\tgateway CPUs\tCPU wait\tagents CPUs\tbench CPUs\tCPU % / session\tRSS / session\ttarget\t")
	var notes []string
	for _, r := range steps {
		if r.Error != "" {
			notes = append(notes, fmt.Sprintf("%d sessions: %s", r.Sessions, firstLine(r.Error)))
			if r.Latency.Samples == 0 {
				fmt.Fprintf(tw, "%d\tfailed\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", r.Sessions)
				continue
			}
		}
		met := "missed"
		if r.Met {
			met = "met"
		}
		fmt.Fprintf(tw, "%d\t%d / %d\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%s\t%s\t\n", r.Sessions, r.Updates, r.Expected, r.DeliveredRate,
			r.Latency.P50, r.Latency.P99, r.Latency.P999, r.Latency.Max, r.CutOffs, r.Failed, r.GatewayCores, r.GatewayCPUWait, r.AgentsCores, r.BenchCores, r.CPUPerSession*100, fmtBytes(r.RSSPerSession), met)
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(w, "  "+n)
	}
	fmt.Fprintln(w, "  "+rateVerdict(steps))
}

// rateVerdict says how far the phase scaled.
func rateVerdict(steps []RateResult) string {
	largest, missed := rateScale(steps)
	switch {
	case largest == 0:
		return fmt.Sprintf("no step met p99 < %d ms with 0 cut-offs", RateTargetP99Ms)
	case missed:
		return fmt.Sprintf("scales to %d sessions before p99 passes %d ms (or a stream is cut off)", largest, RateTargetP99Ms)
	}
	return fmt.Sprintf("%d sessions met p99 < %d ms with 0 cut-offs", largest, RateTargetP99Ms)
}

// errNoRateSteps is Config.Check's error for a bad --rate-sessions.
var errNoRateSteps = errors.New("--rate-sessions: each step 1 to 10000 sessions")
