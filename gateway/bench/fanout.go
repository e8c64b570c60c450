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
	// Where the agent's time went while it wrote the turn (first to last
	// send stamp), in percent of it: running, runnable but waiting for a
	// CPU (the machine is busy), and the rest, blocked, which for this
	// agent is waiting for room in its output pipe: the gateway reading
	// more slowly than it writes. From the agent's threads' schedstat
	// before and after the turn (so they count its start and end too).
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
	run0, wait0, agentErr := schedstat(agentPID)
	driver, err := promptTurn(ctx, c, id, w, nil)
	run1, wait1, agentErr1 := schedstat(agentPID)
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
		if agentErr == nil && agentErr1 == nil {
			pct := func(d time.Duration) float64 { return round3(100 * float64(d) / float64(span)) }
			run, wait := run1-run0, wait1-wait0
			res.AgentRunPct, res.AgentCPUWaitPct = pct(run), pct(wait)
			res.AgentBlockedPct = pct(max(0, time.Duration(span)-run-wait))
		}
	}
	if span := lastRecv - driver.FirstSend; span > 0 {
		res.DeliveredRate = float64(delivered) / (float64(span) / 1e9)
	}
	res.Latency = seen.Latency
	if delivered > 0 {
		res.CPUPer1000 = round3((cpu1 - cpu0).Seconds() / float64(delivered) * 1000)
	}
	return res
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
