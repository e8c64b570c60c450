package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/sandbox"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// ScaleResult is the many-sessions phase: Sessions sessions of the
// synthetic agent, each created and run through one turn (Concurrency at
// a time), then all of them running a turn at once.
type ScaleResult struct {
	Sessions       int `json:"sessions"`
	Concurrency    int `json:"concurrency"`
	UpdatesPerTurn int `json:"updatesPerTurn"`
	// Store is the gateway's store (Config.ScaleStore).
	Store string `json:"store"`
	// Sandbox is how the agents ran: "none", unconfined, or "bwrap", each
	// in a bubblewrap sandbox under the default limits, as an
	// authenticated serve runs them (see Config.ScaleSandbox).
	Sandbox string `json:"sandbox"`
	// Network is the sandboxed agents' network (Config.ScaleNetwork):
	// proxy or host; empty without the sandbox.
	Network string `json:"network,omitempty"`
	// Limits says what bounds each agent and how (cgroup v1 or v2), under
	// the sandbox; empty without.
	Limits string `json:"limits,omitempty"`
	// Memory of the gateway process per session, once every session is
	// idle after its first turn: deltas from before the first session,
	// after a GC, divided by Sessions. Agent processes are not included.
	HeapPerSession  float64 `json:"heapInuseBytesPerSession"`
	StackPerSession float64 `json:"stackInuseBytesPerSession"`
	// LivePerSession counts live heap objects only (HeapAlloc after a GC):
	// HeapPerSession less the free room in the spans they sit in.
	LivePerSession       float64 `json:"heapAllocBytesPerSession"`
	RSSPerSession        float64 `json:"rssBytesPerSession"`
	GoroutinesPerSession float64 `json:"goroutinesPerSession"`
	ThreadsPerSession    float64 `json:"threadsPerSession"`
	// HeapPerTurn is what the second turn added to the heap, per session:
	// its merged tool calls and, in the memory store, its events.
	// HeapPerSession minus HeapPerTurn estimates an idle session without
	// any.
	HeapPerTurn float64 `json:"heapInuseBytesPerTurn"`
	// CreateToFirstEvent is from sending CreateSession to receiving the
	// first agent update of the session's first Prompt (agent start,
	// initialize, session/new, Prompt, first update).
	CreateToFirstEvent Latency `json:"createToFirstEventMs"`
	// ConcurrentRate and ConcurrentLatency are of every session's second
	// turn, all at once: updates/s over all sessions, and latency.
	ConcurrentRate    float64 `json:"concurrentUpdatesPerSecond"`
	ConcurrentLatency Latency `json:"concurrentLatencyMs"`
	CutOffs           int     `json:"cutOffs"`
	Failed            int     `json:"failedSessions"`
	// Leftover counts the gateway's child processes alive after it shut
	// down (its own count).
	Leftover int    `json:"leftoverChildren"`
	Error    string `json:"error,omitempty"`
}

// runScale runs the scale phase on a gateway of its own, its agents
// confined as sandboxMode says (sandbox.ModeNone or sandbox.ModeBwrap, whose
// agents' homes are made under homes); with profile flags, the CPU profile
// covers the sessions' creation and first turns, and the heap profile
// (whose inuse_space is then the idle sessions') is written when they are
// all idle. A gateway that cannot confine its agents here (no bwrap, no
// writable cgroup) gives a result whose Error says why.
func runScale(ctx context.Context, self []string, runID string, tr *transports, cfg *Config, cwd, storeURL, sandboxMode, homes string, profile []string, progress func(string, ...any)) (res ScaleResult) {
	res = ScaleResult{Sessions: cfg.Sessions, Concurrency: cfg.ScaleConcurrency, UpdatesPerTurn: cfg.ScaleUpdates, Store: cfg.ScaleStore, Sandbox: sandboxMode}
	extra := slices.Clone(profile)
	if sandboxMode != sandbox.ModeNone {
		res.Network = cfg.ScaleNetwork
		extra = append(extra, "--sandbox", sandboxMode, "--sandbox-homes", homes, "--sandbox-network", cfg.ScaleNetwork)
	}
	g, err := startGateway(ctx, self, runID, storeURL, extra...)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Limits = g.confined
	defer g.stopInto(tr, &res.Leftover, &res.Error)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	c := tr.client(protoConnectIdentity, g.base, true)
	before, err := g.warmUp(ctx, c, cwd)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	stopProfile := g.profileWhile(ctx, len(profile) > 0, progress)
	w := Workload{Updates: cfg.ScaleUpdates, Payload: cfg.Payload}
	ids := make([]string, cfg.Sessions)
	firsts := make([]int64, cfg.Sessions)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, cfg.ScaleConcurrency))
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		res.Failed++
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	start := time.Now()
	for i := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			protocol := cfg.Mix[i%len(cfg.Mix)]
			t0 := time.Now().UnixNano()
			created, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agentName(protocol), Cwd: cwd}))
			if err != nil {
				fail(fmt.Errorf("CreateSession: %w", err))
				return
			}
			id := created.Msg.GetSessionId()
			if _, err := promptTurn(ctx, c, id, w, func(recv int64) { firsts[i] = recv - t0 }); err != nil {
				fail(err)
				return
			}
			ids[i] = id
		}(i)
	}
	wg.Wait()
	progress("scale (%s): %d sessions created and through one turn in %.1fs (%d failed)", scaleLabel(sandboxMode), cfg.Sessions, time.Since(start).Seconds(), res.Failed)
	after, err := idleMemstats(ctx, g)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	stopProfile()
	var live []string
	var firstSamples []int64
	for i, id := range ids {
		if id != "" {
			live = append(live, id)
			firstSamples = append(firstSamples, firsts[i])
		}
	}
	if n := float64(len(live)); n > 0 {
		res.HeapPerSession = (float64(after.HeapInuse) - float64(before.HeapInuse)) / n
		res.StackPerSession = (float64(after.StackInuse) - float64(before.StackInuse)) / n
		res.LivePerSession = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
		res.RSSPerSession = (float64(after.RSS) - float64(before.RSS)) / n
		res.GoroutinesPerSession = float64(after.Goroutines-before.Goroutines) / n
		res.ThreadsPerSession = float64(after.Threads-before.Threads) / n
	}
	res.CreateToFirstEvent = latencyOf(firstSamples)

	// Every session's second turn, all at once.
	results := make([]turnResult, len(live))
	ready := make(chan struct{})
	for i, id := range live {
		wg.Add(1)
		go func(i int, id string) {
			defer wg.Done()
			<-ready
			r, err := promptTurn(ctx, c, id, w, nil)
			if err != nil {
				fail(fmt.Errorf("second turn: %w", err))
			}
			results[i] = r
		}(i, id)
	}
	close(ready)
	wg.Wait()
	var samples []int64
	var total int
	var first, last int64
	for _, r := range results {
		if r.Updates == 0 {
			continue
		}
		total += r.Updates
		samples = append(samples, r.Samples...)
		res.CutOffs += r.CutOffs
		if first == 0 || r.FirstSend < first {
			first = r.FirstSend
		}
		last = max(last, r.LastRecv)
	}
	if last > first {
		res.ConcurrentRate = float64(total) / (float64(last-first) / 1e9)
	}
	res.ConcurrentLatency = latencyOf(samples)
	if again, err := idleMemstats(ctx, g); err == nil && len(live) > 0 {
		res.HeapPerTurn = (float64(again.HeapInuse) - float64(after.HeapInuse)) / float64(len(live))
	}
	if firstErr != nil {
		res.Error = firstErr.Error()
	}
	return res
}

// idleMemstats reads the memory of the gateway, whose sessions are idle.
func idleMemstats(ctx context.Context, g *gatewayProc) (memStats, error) {
	return g.memstats(ctx)
}

// ScaleSandboxBoth, as Config.ScaleSandbox, runs the scale phase twice:
// without the sandbox, then with it.
const ScaleSandboxBoth = "both"

// ScaleSandboxes are the values of Config.ScaleSandbox.
var ScaleSandboxes = []string{ScaleSandboxBoth, sandbox.ModeNone, sandbox.ModeBwrap}

// scaleModes are the sandbox modes the scale phase runs in, in order.
func (c *Config) scaleModes() []string {
	if c.ScaleSandbox == ScaleSandboxBoth {
		return []string{sandbox.ModeNone, sandbox.ModeBwrap}
	}
	return []string{c.ScaleSandbox}
}

// scaleLabel names a scale run's confinement for the report.
func scaleLabel(mode string) string {
	if mode == sandbox.ModeBwrap {
		return "bwrap + limits"
	}
	return "unconfined"
}

// flags are the serve flags of the run's confinement.
func (s *ScaleResult) flags() string {
	if s.Sandbox != sandbox.ModeBwrap {
		return "--sandbox " + s.Sandbox
	}
	return "--sandbox bwrap --sandbox-network " + s.Network
}
