package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

// FanoutResult is one fan-out level: one session, one turn, Watchers
// Watch streams besides the Prompt stream that drives it.
type FanoutResult struct {
	Watchers int `json:"watchers"`
	// Updates is the turn's size.
	Updates int `json:"updates"`
	// AgentRate is the rate at which the agent wrote the turn (its first to
	// last send stamp), updates/s: the agent is slowed when the gateway
	// reads its output slower than it writes.
	AgentRate float64 `json:"agentUpdatesPerSecond"`
	// AgentVsOne is AgentRate over the AgentRate with one watcher.
	AgentVsOne float64 `json:"agentRateVsOneWatcher,omitempty"`
	// Where the agent's time went during the driving Prompt call, in
	// percent of it (see agentShares): running, runnable but waiting for
	// a CPU (the machine is busy), and the rest, blocked, which for this
	// agent is waiting for room in its output pipe: the gateway reading
	// more slowly than it writes. From the agent's threads' schedstat
	// before and after the call, so the turn's start and end count too:
	// in a short turn (--quick) they are most of it.
	AgentRunPct     float64 `json:"agentRunPercent"`
	AgentCPUWaitPct float64 `json:"agentCPUWaitPercent"`
	AgentBlockedPct float64 `json:"agentBlockedPercent"`
	// DeliveredRate is updates delivered to all watchers per second, from
	// the first send to the last watcher's last receive.
	DeliveredRate float64 `json:"deliveredUpdatesPerSecond"`
	// Latency is agent write to watcher receive, over every watcher.
	Latency Latency `json:"latencyMs"`
	// CutOffs counts watchers cut off for lagging (they resumed with Watch).
	CutOffs int `json:"cutOffs"`
	// CPUPer1000 is gateway CPU seconds per 1,000 delivered updates.
	CPUPer1000 float64 `json:"cpuSecondsPer1000Delivered"`
	// WatchersCPUPer1000 is the watchers' CPU seconds per 1,000 delivered
	// updates: when they need more CPU than the gateway and run at nice
	// 19 on a busy host, they are what bounds delivery, not the gateway.
	WatchersCPUPer1000 float64 `json:"watchersCpuSecondsPer1000Delivered"`
	// WatchersNice is the CPU priority the watchers ran at (see
	// watchersNice).
	WatchersNice int    `json:"watchersNice"`
	Error        string `json:"error,omitempty"`
}

// fanout runs one fan-out level against the gateway g.
func fanout(ctx context.Context, self []string, runID string, g *gatewayProc, tr *transports, watchers int, w Workload, protocol int, cwd string) FanoutResult {
	res := FanoutResult{Watchers: watchers, Updates: w.Updates}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	c := tr.client(protoConnectIdentity, g.base, true)
	before := procfs.Children(g.pid)
	created, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agentName(protocol), Cwd: cwd}))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	id := created.Msg.GetSessionId()
	agentPID := newChild(g.pid, before, "agent")
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = c.CloseSession(cctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id}))
	}()

	// The watchers run in a child process at low priority (see
	// watchersNice); it returns once every stream is open.
	wp, err := startWatchers(ctx, self, runID, g.base, id, watchers, w.Updates)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	cpu0, _ := procCPU(g.pid)
	t0 := time.Now()
	run0, wait0, agentErr := schedstat(agentPID)
	driver, err := promptTurn(ctx, c, id, w, nil)
	run1, wait1, agentErr1 := schedstat(agentPID)
	window := time.Since(t0)
	if err != nil {
		wp.kill()
		res.Error = "the driving turn: " + err.Error()
		return res
	}
	seen, err := wp.wait(ctx)
	cpu1, _ := procCPU(g.pid)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Error, res.CutOffs, res.WatchersNice = seen.Error, seen.CutOffs, seen.Nice
	delivered := seen.Delivered
	lastRecv := max(driver.LastRecv, seen.LastRecv)
	if span := driver.LastSend - driver.FirstSend; span > 0 {
		res.AgentRate = float64(driver.Updates-1) / (float64(span) / 1e9)
	}
	if agentErr == nil && agentErr1 == nil {
		// Of the Prompt call's time, not of the send stamps' span.
		res.AgentRunPct, res.AgentCPUWaitPct, res.AgentBlockedPct = agentShares(run1-run0, wait1-wait0, window)
	}
	if span := lastRecv - driver.FirstSend; span > 0 {
		res.DeliveredRate = float64(delivered) / (float64(span) / 1e9)
	}
	res.Latency = seen.Latency
	if delivered > 0 {
		res.CPUPer1000 = round3((cpu1 - cpu0).Seconds() / float64(delivered) * 1000)
		res.WatchersCPUPer1000 = round3(seen.CPU / float64(delivered) * 1000)
	}
	return res
}

// agentShares splits window, the time between two readings of the agent's
// schedstat, into the shares of it, in percent, that the agent ran (run),
// waited for a CPU (wait) and was blocked (the rest). The times are summed
// over the agent's threads, which may run or wait at once: where they add
// up to more than the window, the shares are of their sum and blocked is
// 0. The three add up to 100, or are all 0 for an empty window.
//
// The shares were once taken of the span of the agent's send stamps while
// the times covered the whole Prompt call: a turn of a few hundred updates
// then showed the agent running 200% of its turn.
func agentShares(run, wait, window time.Duration) (runPct, waitPct, blockedPct float64) {
	total := max(window, run+wait)
	if total <= 0 {
		return 0, 0, 0
	}
	pct := func(d time.Duration) float64 { return round3(100 * float64(d) / float64(total)) }
	return pct(run), pct(wait), pct(total - run - wait)
}

// newChild returns the child of process parent that is not in before and
// runs the bench's child mode mode, or 0.
func newChild(parent int, before []int, mode string) int {
	for _, pid := range procfs.Children(parent) {
		if slices.Contains(before, pid) {
			continue
		}
		if cl := procfs.Cmdline(pid); slices.Contains(cl, mode) && slices.Contains(cl, "--run") {
			return pid
		}
	}
	return 0
}

func (r FanoutResult) String() string {
	if r.Error != "" {
		return fmt.Sprintf("%d watchers: failed: %s", r.Watchers, r.Error)
	}
	return fmt.Sprintf("%d watchers: agent %.0f upd/s, delivered %.0f upd/s, p99 %.2f ms, %d cut off", r.Watchers, r.AgentRate, r.DeliveredRate, r.Latency.P99, r.CutOffs)
}
