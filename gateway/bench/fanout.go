package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
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
	// DeliveredRate is updates delivered to all watchers per second, from
	// the first send to the last watcher's last receive.
	DeliveredRate float64 `json:"deliveredUpdatesPerSecond"`
	// Latency is agent write to watcher receive, over every watcher.
	Latency Latency `json:"latencyMs"`
	// CutOffs counts watchers cut off for lagging (they resumed with Watch).
	CutOffs int `json:"cutOffs"`
	// CPUPer1000 is gateway CPU seconds per 1,000 delivered updates.
	CPUPer1000 float64 `json:"cpuSecondsPer1000Delivered"`
	Error      string  `json:"error,omitempty"`
}

// fanout runs one fan-out level against the gateway g.
func fanout(ctx context.Context, g *gatewayProc, tr *transports, watchers int, w Workload, protocol int, cwd string) FanoutResult {
	res := FanoutResult{Watchers: watchers, Updates: w.Updates}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	c := tr.client(protoConnectIdentity, g.base, true)
	created, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agentName(protocol), Cwd: cwd}))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	id := created.Msg.GetSessionId()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = c.CloseSession(cctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id}))
	}()

	// Open the watchers, 64 at a time; each is registered once Watch
	// returned (the gateway opens a stream with a heartbeat).
	type watcher struct {
		stream *connect.ServerStreamForClient[acpv2.WatchResponse]
		stop   context.CancelFunc
		k      tracker
		err    error
	}
	ws := make([]*watcher, watchers)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var openErr error
	var mu sync.Mutex
	for i := range ws {
		ws[i] = &watcher{}
		wg.Add(1)
		sem <- struct{}{}
		go func(wt *watcher) {
			defer wg.Done()
			defer func() { <-sem }()
			wctx, stop := context.WithCancel(ctx)
			s, err := c.Watch(wctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
			if err != nil {
				stop()
				mu.Lock()
				openErr = err
				mu.Unlock()
				return
			}
			wt.stream, wt.stop = s, stop
		}(ws[i])
	}
	wg.Wait()
	if openErr != nil {
		for _, wt := range ws {
			if wt.stop != nil {
				wt.stop()
				_ = wt.stream.Close()
			}
		}
		res.Error = "Watch: " + openErr.Error()
		return res
	}
	for _, wt := range ws {
		wg.Add(1)
		go func(wt *watcher) {
			defer wg.Done()
			wt.k.r.Samples = make([]int64, 0, w.Updates)
			wt.err = consume(ctx, c, id, wt.stream, wt.stop, &wt.k, nil)
		}(wt)
	}
	cpu0, _ := procCPU(g.pid)
	driver, err := promptTurn(ctx, c, id, w, nil)
	if err != nil {
		cancel()
		wg.Wait()
		res.Error = "the driving turn: " + err.Error()
		return res
	}
	wg.Wait()
	cpu1, _ := procCPU(g.pid)
	var all []int64
	var delivered int
	lastRecv := driver.LastRecv
	for _, wt := range ws {
		if wt.err != nil && res.Error == "" {
			res.Error = "Watch: " + wt.err.Error()
		}
		all = append(all, wt.k.r.Samples...)
		delivered += wt.k.r.Updates
		res.CutOffs += wt.k.r.CutOffs
		lastRecv = max(lastRecv, wt.k.r.LastRecv)
	}
	if span := driver.LastSend - driver.FirstSend; span > 0 {
		res.AgentRate = float64(driver.Updates-1) / (float64(span) / 1e9)
	}
	if span := lastRecv - driver.FirstSend; span > 0 {
		res.DeliveredRate = float64(delivered) / (float64(span) / 1e9)
	}
	res.Latency = latencyOf(all)
	if delivered > 0 {
		res.CPUPer1000 = round3((cpu1 - cpu0).Seconds() / float64(delivered) * 1000)
	}
	return res
}

func (r FanoutResult) String() string {
	if r.Error != "" {
		return fmt.Sprintf("%d watchers: failed: %s", r.Watchers, r.Error)
	}
	return fmt.Sprintf("%d watchers: agent %.0f upd/s, delivered %.0f upd/s, p99 %.2f ms, %d cut off", r.Watchers, r.AgentRate, r.DeliveredRate, r.Latency.P99, r.CutOffs)
}
