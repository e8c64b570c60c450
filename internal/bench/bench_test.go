package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
)

// Every update line is JSON that the gateway's codec decodes, stamped in
// _meta.bench, for both protocol versions.
func TestLinesDecodeWithTheirStamp(t *testing.T) {
	t.Parallel()
	for _, v := range []int{1, 2} {
		lm := newLineMaker(v, 64, "s-1")
		for n := 1; n <= 2*groupSize; n++ {
			line := lm.appendLine(nil, n, int64(1000+n))
			var m inbound
			if err := decodeLine(line, &m); err != nil {
				t.Fatalf("v%d update %d: %v\n%s", v, n, err, line)
			}
			if b := m.Params.Update.Meta.Bench; b.N != int64(n) || b.T != strconv.Itoa(1000+n) {
				t.Fatalf("v%d update %d: stamp %+v", v, n, b)
			}
			var p struct {
				Params struct {
					Update json.RawMessage `json:"update"`
				} `json:"params"`
			}
			if err := json.Unmarshal(line, &p); err != nil {
				t.Fatal(err)
			}
			u, err := acpjson.DecodeUpdate(p.Params.Update, acpjson.Version(v))
			if err != nil {
				t.Fatalf("v%d update %d does not decode: %v", v, n, err)
			}
			if u.GetUnknown() != nil {
				t.Fatalf("v%d update %d decodes as unknown: %s", v, n, line)
			}
		}
	}
}

// The agent answers the handshake and plays a workload, ending a v1 turn
// with the prompt's answer and a v2 turn with an idle state_update first.
func TestAgentPlaysAWorkload(t *testing.T) {
	t.Parallel()
	for _, v := range []int{1, 2} {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- ServeAgent(context.Background(), inR, outW, v)
			outW.Close()
		}()
		br := bufio.NewReader(outR)
		send := func(line []byte) error { _, err := inW.Write(append(line, '\n')); return err }
		recv := func() ([]byte, error) { return br.ReadBytes('\n') }
		var idle bool
		recvWatch := func() ([]byte, error) {
			line, err := recv()
			if strings.Contains(string(line), `"state":"idle"`) {
				idle = true
			}
			return line, err
		}
		r, err := lineClient(v, Workload{Updates: 25, Payload: 32}, "/", false, send, recvWatch, nil)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if r.Updates != 25 || len(r.Samples) != 25 {
			t.Fatalf("v%d: %d updates, %d samples", v, r.Updates, len(r.Samples))
		}
		if idle != (v == 2) {
			t.Fatalf("v%d: idle state_update sent: %v", v, idle)
		}
		inW.Close()
		if err := <-done; err != nil {
			t.Fatalf("v%d: ServeAgent: %v", v, err)
		}
	}
}

func TestLatencyPercentiles(t *testing.T) {
	t.Parallel()
	var s []int64
	for i := 1000; i >= 1; i-- {
		s = append(s, int64(i)*1000) // 1 µs .. 1 ms
	}
	l := latencyOf(s)
	if l.Samples != 1000 || l.P50 != 0.5 || l.P99 != 0.99 || l.P999 != 0.999 || l.Max != 1 {
		t.Fatalf("got %+v", l)
	}
	if (latencyOf(nil) != Latency{}) {
		t.Fatal("no samples should give a zero Latency")
	}
}

func TestTrackerIgnoresRepeats(t *testing.T) {
	t.Parallel()
	var k tracker
	k.see(1, 10, 15)
	k.see(1, 10, 16) // the merged tool_call of the same update
	k.see(2, 20, 30)
	if k.r.Updates != 2 || k.r.FirstSend != 10 || k.r.LastSend != 20 || k.r.LastRecv != 30 || len(k.r.Samples) != 2 {
		t.Fatalf("got %+v", k.r)
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	good := Defaults(true)
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"bad protocol":   func(c *Config) { c.Mix = []int{3} },
		"no protocol":    func(c *Config) { c.Mix = nil },
		"bad path":       func(c *Config) { c.Paths = []string{"carrier-pigeon"} },
		"zero fanout":    func(c *Config) { c.Fanout = []int{0} },
		"bad profile":    func(c *Config) { c.ProfilePath = "everything" },
		"no timeout":     func(c *Config) { c.Timeout = 0 },
		"no rounds":      func(c *Config) { c.Rounds = 0 },
		"bad sandbox":    func(c *Config) { c.ScaleSandbox = "gvisor" },
		"no sandbox":     func(c *Config) { c.ScaleSandbox = "" },
		"bad network":    func(c *Config) { c.ScaleNetwork = "none" },
		"bad bombs":      func(c *Config) { c.Bombs = -1 },
		"no bomb round":  func(c *Config) { c.BombRounds = 0 },
		"no samples":     func(c *Config) { c.BombSamples = 0 },
		"bad throttle":   func(c *Config) { c.BombThrottle = "sometimes" },
		"bad nice":       func(c *Config) { c.BombersNice = 20 },
		"no rate step":   func(c *Config) { c.RateSessions = []int{0} },
		"no rate":        func(c *Config) { c.RatePerSession = 0 },
		"rate too fast":  func(c *Config) { c.RatePerSession = 1001 },
		"rate too short": func(c *Config) { c.RateDuration = time.Millisecond },
		"bad rate store": func(c *Config) { c.RateStore = "redis" },
	} {
		c := Defaults(true)
		mut(&c)
		if err := c.Check(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Each path reports its median round, whole, with every round's rate and
// p99; its comparison with websocketd is the median of the rounds' own.
func TestMedianPaths(t *testing.T) {
	t.Parallel()
	round := func(wsd, proto, wsdP99, protoP99 float64, protoErr string) []PathResult {
		return []PathResult{
			{Key: "websocketd", Present: true, UpdatesPerSecond: wsd, CPUPer1000: wsd / 1e6, Latency: Latency{P99: wsdP99}},
			{Key: "proto", Present: true, Gateway: true, UpdatesPerSecond: proto, CPUPer1000: proto / 1e6, Latency: Latency{P99: protoP99}, Error: protoErr},
		}
	}
	// A slow round (the second) slows both paths and their latency.
	rep := &Report{Paths: medianPaths([][]PathResult{round(100, 90, 1, 1.5, ""), round(50, 60, 8, 9, ""), round(80, 70, 1, 1.25, "")})}
	rep.finish()
	wsd, proto := rep.path("websocketd"), rep.path("proto")
	if wsd.UpdatesPerSecond != 80 || wsd.CPUPer1000 != 80/1e6 || !slices.Equal(wsd.RoundRates, []float64{100, 50, 80}) || !slices.Equal(wsd.RoundP99s, []float64{1, 8, 1}) {
		t.Errorf("websocketd %+v, want the 80 round with rates 100, 50, 80", *wsd)
	}
	if proto.UpdatesPerSecond != 70 || proto.CPUPer1000 != 70/1e6 || !slices.Equal(proto.RoundRates, []float64{90, 60, 70}) {
		t.Errorf("proto %+v, want the 70 round with rates 90, 60, 70", *proto)
	}
	r := proto.VsWebsocketd
	if r == nil || !slices.Equal(r.RoundThroughputs, []float64{0.9, 1.2, 0.875}) || !slices.Equal(r.RoundP99DeltasMs, []float64{0.5, 1, 0.25}) {
		t.Fatalf("vs websocketd %+v", r)
	}
	// Medians of the rounds' comparisons, not comparisons of medians
	// (70/80 = 0.875, 1.25 - 1 = 0.25).
	if r.Throughput != 0.9 || r.P99DeltaMs != 0.5 || r.P99 != 1.25 {
		t.Errorf("vs websocketd: throughput %v, p99 delta %v, p99 ratio %v; want 0.9, 0.5, 1.25", r.Throughput, r.P99DeltaMs, r.P99)
	}
	for _, want := range []string{"0.90x websocketd (median of rounds 0.90x, 1.20x, 0.88x)", "p99 +0.50 ms vs websocketd (median of rounds +0.50, +1.00, +0.25 ms"} {
		if !strings.Contains(rep.Headline, want) {
			t.Errorf("headline %q lacks %q", rep.Headline, want)
		}
	}

	// Even counts take the lower middle; a failed round is reported.
	two := medianPaths([][]PathResult{round(100, 90, 1, 1, ""), round(50, 60, 1, 1, "")})
	if two[0].UpdatesPerSecond != 50 || two[1].UpdatesPerSecond != 60 {
		t.Errorf("two rounds: %v, %v, want the lower middles 50, 60", two[0].UpdatesPerSecond, two[1].UpdatesPerSecond)
	}
	failed := medianPaths([][]PathResult{round(100, 90, 1, 1, ""), round(50, 0, 1, 1, "the gateway died")})
	if failed[1].Error != "the gateway died" {
		t.Errorf("a failed round was not reported: %+v", failed[1])
	}
	if got := median([]float64{3, 1, 4, 2}); got != 2.5 {
		t.Errorf("median of 1..4: %v", got)
	}
}

func TestKBField(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(path, []byte("Name:\tacp-gateway\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := kBField(path, "VmRSS"); err != nil || n != 1024<<10 {
		t.Fatalf("VmRSS = %d, %v; want %d", n, err, 1024<<10)
	}
	if _, err := kBField(path, "VmSwap"); err == nil {
		t.Fatal("a missing field gave no error")
	}
}

// The agent's shares of a window add up to 100, each within 0 to 100,
// however its threads' times compare with the window.
func TestAgentShares(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct {
		run, wait, window           time.Duration
		runPct, waitPct, blockedPct float64
	}{
		{run: 10 * ms, wait: 30 * ms, window: 100 * ms, runPct: 10, waitPct: 30, blockedPct: 60},
		{run: 100 * ms, window: 100 * ms, runPct: 100},
		// Two threads at once: more than the window between them.
		{run: 150 * ms, wait: 50 * ms, window: 100 * ms, runPct: 75, waitPct: 25},
		// A turn shorter than its call's start and end, as in --quick:
		// the shares are of the call, not of the turn's send stamps.
		{run: 2 * ms, wait: 6 * ms, window: 8 * ms, runPct: 25, waitPct: 75},
		{},
	} {
		r, w, b := agentShares(c.run, c.wait, c.window)
		if r != c.runPct || w != c.waitPct || b != c.blockedPct {
			t.Errorf("agentShares(%v, %v, %v) = %v, %v, %v; want %v, %v, %v", c.run, c.wait, c.window, r, w, b, c.runPct, c.waitPct, c.blockedPct)
		}
	}
}

// Every gateway path, fanout and scale can be profiled; the pipe and
// websocketd, which run no gateway, cannot.
func TestProfilePaths(t *testing.T) {
	t.Parallel()
	want := []string{"json", "proto", "grpc", "nogzip", "deltas", "acp", "bolt", "boltjson", "redis", "fanout", "scale", "rate"}
	if got := ProfilePaths(); !slices.Equal(got, want) {
		t.Fatalf("ProfilePaths() = %q, want %q", got, want)
	}
	for _, p := range append(want, "pipe", "websocketd") {
		c := Defaults(true)
		c.ProfilePath = p
		if err := c.Check(); (err == nil) != slices.Contains(want, p) {
			t.Errorf("--profile-path %s: Check says %v", p, err)
		}
	}
	if !slices.Contains(PathKeys, "pipe") {
		t.Fatal("ProfilePaths left PathKeys without the pipe")
	}
}

// The scale phase runs without the sandbox and then with it, or as asked.
func TestScaleModes(t *testing.T) {
	t.Parallel()
	for sb, want := range map[string][]string{"both": {"none", "bwrap"}, "none": {"none"}, "bwrap": {"bwrap"}} {
		c := Defaults(true)
		c.ScaleSandbox = sb
		if err := c.Check(); err != nil {
			t.Errorf("--scale-sandbox %s: %v", sb, err)
		}
		if got := c.scaleModes(); !slices.Equal(got, want) {
			t.Errorf("--scale-sandbox %s runs %q, want %q", sb, got, want)
		}
	}
	if d := Defaults(false); d.ScaleSandbox != "both" {
		t.Errorf("the default --scale-sandbox is %q, want both", d.ScaleSandbox)
	}
}

// The report puts the two scale runs' create-to-first-event latency side
// by side; a sandboxed run that could not start says why, in its row, in
// its own block and in the headline, and the unconfined run is still
// reported whole.
func TestReportScaleSideBySide(t *testing.T) {
	t.Parallel()
	none := &ScaleResult{Sessions: 100, Concurrency: 32, UpdatesPerTurn: 10, Store: "bolt", Sandbox: "none",
		HeapPerSession: 40 << 10, CreateToFirstEvent: Latency{Samples: 100, P50: 200, P99: 500, Max: 520}}
	bwrap := &ScaleResult{Sessions: 100, Concurrency: 32, UpdatesPerTurn: 10, Store: "bolt", Sandbox: "bwrap", Network: "proxy",
		Limits: "memory 4 GiB (cgroup v2 /x)", CreateToFirstEvent: Latency{Samples: 100, P50: 230, P99: 610, Max: 700}}
	written := func(rep *Report, wants ...string) string {
		t.Helper()
		rep.finish()
		var b strings.Builder
		rep.Write(&b)
		for _, want := range wants {
			if !strings.Contains(b.String(), want) {
				t.Errorf("the report lacks %q:\n%s", want, b.String())
			}
		}
		return b.String()
	}
	written(&Report{Scale: none, ScaleSandbox: bwrap},
		"agents in bwrap sandboxes, network proxy, under memory 4 GiB (cgroup v2 /x)",
		"                           unconfined (--sandbox none)   200.0   500.0",
		"bwrap + limits (--sandbox bwrap --sandbox-network proxy)   230.0   610.0",
		"the sandbox adds +30.0 ms at p50, +110.0 ms at p99",
		"create to first event unconfined p50 200 / p99 500 ms, bwrap + limits p50 230 / p99 610 ms")

	failed := written(&Report{Scale: none, ScaleSandbox: &ScaleResult{Sessions: 100, Sandbox: "bwrap", Network: "host", Error: "bench gateway did not start: bubblewrap (bwrap) is not installed"}},
		"  error: bench gateway did not start: bubblewrap (bwrap) is not installed",
		"bwrap + limits (--sandbox bwrap --sandbox-network host)  failed",
		"  bwrap + limits (--sandbox bwrap --sandbox-network host): failed: bench gateway did not start: bubblewrap (bwrap) is not installed",
		"create to first event unconfined p50 200 / p99 500 ms, bwrap + limits failed",
		"40.0 KiB per idle session")
	if strings.Contains(failed, "the sandbox adds") {
		t.Errorf("a failed sandboxed run was compared:\n%s", failed)
	}
}

// The bombs phase runs with the throttle off, then at its default, or as
// asked.
func TestBombThrottles(t *testing.T) {
	t.Parallel()
	for throttle, want := range map[string][]string{"both": {"off", "default"}, "off": {"off"}, "default": {"default"}} {
		c := Defaults(true)
		c.BombThrottle = throttle
		if err := c.Check(); err != nil {
			t.Errorf("--bomb-throttle %s: %v", throttle, err)
		}
		if got := c.bombThrottles(); !slices.Equal(got, want) {
			t.Errorf("--bomb-throttle %s runs %q, want %q", throttle, got, want)
		}
	}
	if d := Defaults(false); d.Bombs != 50 || d.BombThrottle != "both" || d.BombersNice != 19 {
		t.Errorf("defaults: %d bombs, throttle %q, nice %d; want 50, both, 19", d.Bombs, d.BombThrottle, d.BombersNice)
	}
}

// The bombs phase reports, per condition, the medians of its rounds'
// figures and the highest peak RSS, and as its ratio the median of the
// rounds' own ratios; the verdict holds the 2x target, in the report and
// in the headline.
func TestBombsSummary(t *testing.T) {
	t.Parallel()
	window := func(get, turn float64, rss int64, bombs map[string]int) BombWindow {
		w := BombWindow{GetSession: Latency{P50: get, P99: 10 * get}, Turn: Latency{P50: turn, P99: 10 * turn}, PeakRSS: rss, AddedRSS: rss - 28<<20, GatewayCPU: get}
		if bombs != nil {
			w.Bombs = &bombersResult{Refused: bombs, PerSecond: 100 * get}
		}
		return w
	}
	r := &BombsResult{Throttle: "off", AuthFailureLimit: -1, Bombers: 50, Rounds: []BombRound{
		// A slow round (the second) slows both of its windows.
		{Quiet: window(1, 4, 30<<20, nil), Control: window(1, 8, 30<<20, map[string]int{"unauthenticated": 9}), Bombed: window(1.5, 4, 40<<20, map[string]int{"unauthenticated": 100})},
		{Quiet: window(4, 8, 31<<20, nil), Control: window(4, 8, 30<<20, map[string]int{"unauthenticated": 9}), Bombed: window(4, 12, 35<<20, map[string]int{"unauthenticated": 50, "ok": 1})},
		{Quiet: window(2, 5, 29<<20, nil), Control: window(3, 5, 30<<20, map[string]int{"unauthenticated": 9}), Bombed: window(2.5, 6, 34<<20, map[string]int{"unauthenticated": 70})},
	}}
	r.summarize()
	if r.Quiet.GetSessionP50 != 2 || r.Quiet.GetSessionP99 != 20 || r.Quiet.TurnP50 != 5 || r.Bombed.GetSessionP50 != 2.5 || r.Bombed.TurnP99 != 60 {
		t.Errorf("medians: quiet %+v, bombed %+v", r.Quiet, r.Bombed)
	}
	if r.Quiet.PeakRSS != 31<<20 || r.Bombed.PeakRSS != 40<<20 || r.Quiet.AddedRSS != 3<<20 || r.Bombed.AddedRSS != 12<<20 {
		t.Errorf("peak RSS %d quiet, %d bombed, adding %d, %d; want the highest of the rounds", r.Quiet.PeakRSS, r.Bombed.PeakRSS, r.Quiet.AddedRSS, r.Bombed.AddedRSS)
	}
	// Medians of the rounds' ratios (1.5, 1, 1.25), not the ratio of the
	// medians (2.5 / 2).
	if !slices.Equal(r.RoundGetP50Ratios, []float64{1.5, 1, 1.25}) || r.GetP50Ratio != 1.25 || r.TurnP50Ratio != 1.2 {
		t.Errorf("ratios: GetSession %v (rounds %v), turn %v (rounds %v)", r.GetP50Ratio, r.RoundGetP50Ratios, r.TurnP50Ratio, r.RoundTurnP50Ratios)
	}
	if r.ControlGetP50Ratio != 1 || r.ControlTurnP50Ratio != 1 || r.Control.Refused["unauthenticated"] != 27 {
		t.Errorf("control: %v, %v, %+v", r.ControlGetP50Ratio, r.ControlTurnP50Ratio, r.Control)
	}
	if r.Bombed.Refused["unauthenticated"] != 220 || r.Bombed.Refused["ok"] != 1 || r.Bombed.BombsPerSecond != 250 || r.Quiet.Refused != nil {
		t.Errorf("bombs: quiet %+v, bombed %+v", r.Quiet, r.Bombed)
	}
	if !r.Met() {
		t.Error("1.25x and 1.2x do not meet the 2x target")
	}
	rep := &Report{Bombs: []BombsResult{*r}}
	rep.finish()
	var b strings.Builder
	rep.Write(&b)
	for _, want := range []string{
		"bombs, throttle off (--auth-failure-limit -1): 50 unauthenticated requests at once",
		"                           without bombs              2.000  20.000        5.000  50.000  31.0 MiB            3.0 MiB            2.0        -                          -",
		"bombs at a server of their own (control)              3.000  30.000        8.000  80.000  30.0 MiB            2.0 MiB            3.0      300         unauthenticated 27",
		"                    bombs at the gateway              2.500  25.000        6.000  60.000  40.0 MiB           12.0 MiB            2.5      250  unauthenticated 220, ok 1",
		"control / without, p50: GetSession 1.00x, Prompt turn 1.00x",
		"at the gateway / without, p50: GetSession 1.25x (rounds 1.50x, 1.00x, 1.25x), Prompt turn 1.20x (rounds 1.00x, 1.50x, 1.20x)",
		"(target <= 2x: met); peak RSS 31.0 MiB without (a window added at most 3.0 MiB), 40.0 MiB with (12.0 MiB)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
	if want := "50 bombs (throttle off): another user's p50 1.25x GetSession, 1.20x Prompt turn (target <= 2x: met)"; !strings.Contains(rep.Headline, want) {
		t.Errorf("headline %q lacks %q", rep.Headline, want)
	}

	// Over the target, or failed, it says so.
	r.Rounds[0].Bombed.GetSession.P50, r.Rounds[2].Bombed.GetSession.P50 = 3, 5
	r.summarize()
	if r.Met() || !strings.Contains(r.verdict(), "NOT met") {
		t.Errorf("%v x is within the target: %s", r.GetP50Ratio, r.verdict())
	}
	r.Error = "bombers did not start"
	rep = &Report{Bombs: []BombsResult{*r}}
	rep.finish()
	if !strings.Contains(rep.Headline, "bombs (throttle off) failed") {
		t.Errorf("headline %q does not say the bombs phase failed", rep.Headline)
	}
}

// The headline quotes serve's default configuration first (bolt, Connect
// binary and JSON, their cut-offs), the memory store's binary path after
// it for comparison, the fan-out's delivered latency beside the agent's
// rate, and the many-sessions phase's last step and how far it scaled.
func TestHeadlineDefaultConfigurationFirst(t *testing.T) {
	t.Parallel()
	path := func(key string, rate, p99 float64, cutOffs int) PathResult {
		return PathResult{Key: key, Present: true, Gateway: key != "websocketd", UpdatesPerSecond: rate, Latency: Latency{P99: p99}, CutOffs: cutOffs}
	}
	rep := &Report{
		Paths:  []PathResult{path("websocketd", 100, 1, 0), path("proto", 150, 1.5, 0), path("bolt", 50, 3, 0), path("boltjson", 40, 4, 2)},
		Fanout: []FanoutResult{{Watchers: 1, AgentRate: 1000, AgentVsOne: 1}, {Watchers: 1000, AgentRate: 900, AgentVsOne: 0.9, Latency: Latency{P50: 700, P99: 1800}}},
		Rate: []RateResult{
			{Sessions: 100, PerSecond: 20, Store: "bolt", Latency: Latency{Samples: 10, P99: 20}, CPUPerSession: 0.002, RSSPerSession: 100 << 10, Met: true},
			{Sessions: 250, PerSecond: 20, Store: "bolt", Latency: Latency{Samples: 10, P99: 80}, CPUPerSession: 0.003, RSSPerSession: 200 << 10},
		},
	}
	rep.finish()
	h := rep.Headline
	if !strings.HasPrefix(h, "headline: gateway (bolt, connect+proto) 50 upd/s = 0.50x websocketd; p99 3.00 ms vs websocketd 1.00 ms (+2.00 ms; target <= +1 ms); "+
		"gateway (bolt, connect+json) 40 upd/s = 0.40x websocketd; p99 4.00 ms vs websocketd 1.00 ms (+3.00 ms; target <= +1 ms), 2 streams cut off (target 0); "+
		"for comparison, gateway (memory, connect+proto) 150 upd/s = 1.50x websocketd") {
		t.Errorf("headline does not start with the bolt paths and then the memory one: %q", h)
	}
	for _, want := range []string{
		"1000 watchers: agent at 900 upd/s (0.90x its 1-watcher rate), delivered p50 700 / p99 1800 ms, 0 cut off",
		"250 sessions at 20 upd/s each (bolt, connect+json): p99 80.0 ms (target < 50 ms), 0 cut off, 0.30% of a CPU and 200.0 KiB RSS per session; scales to 100 sessions before p99 passes 50 ms",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("headline %q lacks %q", h, want)
		}
	}
	var out strings.Builder
	rep.Write(&out)
	for _, want := range []string{"many sessions at a realistic rate: each agent 0 updates/s", "met", "missed", "agents CPUs", "bench CPUs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

// How far the many-sessions phase scales: the largest step that met the
// target, said as such only when a larger one missed it.
func TestRateVerdict(t *testing.T) {
	t.Parallel()
	met := func(n int, ok bool) RateResult { return RateResult{Sessions: n, Met: ok} }
	for _, c := range []struct {
		steps []RateResult
		want  string
	}{
		{[]RateResult{met(100, true), met(250, true)}, "250 sessions met p99 < 50 ms with 0 cut-offs"},
		{[]RateResult{met(100, true), met(250, false)}, "scales to 100 sessions before p99 passes 50 ms"},
		{[]RateResult{met(100, false)}, "no step met p99 < 50 ms"},
	} {
		if got := rateVerdict(c.steps); !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.steps, got, c.want)
		}
	}
}

// The fan-out says what bounds delivery: the watchers' CPU per delivered
// update beside the gateway's, in the table and, as their ratio, in the
// headline.
func TestFanoutSaysWhatBoundsDelivery(t *testing.T) {
	t.Parallel()
	rep := &Report{Fanout: []FanoutResult{
		{Watchers: 1, AgentRate: 1000, AgentVsOne: 1, CPUPer1000: 0.07, WatchersCPUPer1000: 0.05, WatchersNice: 19},
		{Watchers: 1000, AgentRate: 900, AgentVsOne: 0.9, Latency: Latency{P50: 700, P99: 1800}, CPUPer1000: 0.01, WatchersCPUPer1000: 0.022, WatchersNice: 19},
	}}
	rep.finish()
	if want := "1000 watchers: agent at 900 upd/s (0.90x its 1-watcher rate), delivered p50 700 / p99 1800 ms, 0 cut off, " +
		"the watchers (nice 19) taking 2.20x the gateway's CPU"; !strings.Contains(rep.Headline, want) {
		t.Errorf("headline %q lacks %q", rep.Headline, want)
	}
	var out strings.Builder
	rep.Write(&out)
	var row string
	for line := range strings.Lines(out.String()) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "1000" {
			row = line
		}
	}
	if f := strings.Fields(row); len(f) < 2 || f[len(f)-2] != "0.010" || f[len(f)-1] != "0.022" {
		t.Errorf("the 1,000 watchers' row does not end with the gateway's and the watchers' CPU per 1k delivered: %q\n%s", row, out.String())
	}
	if !strings.Contains(out.String(), "CPU s/1k delivered  watchers CPU s/1k") {
		t.Errorf("the fan-out table lacks the watchers' CPU column:\n%s", out.String())
	}
}

// descendantsCPU counts the CPU of the processes below one, grandchildren
// too (an agent's own children), by pid.
func TestDescendantsCPU(t *testing.T) {
	cmd := exec.Command("sh", "-c", "(while :; do :; done) & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// The shell and its busy subshell, once the subshell started.
	var from map[int]time.Duration
	for deadline := time.Now().Add(10 * time.Second); len(from) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("descendants found: %v", from)
		}
		from = descendantsCPU(os.Getpid())
	}
	for deadline := time.Now().Add(10 * time.Second); cpuOver(from, descendantsCPU(os.Getpid())) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the busy grandchild's CPU is not counted")
		}
	}
}
