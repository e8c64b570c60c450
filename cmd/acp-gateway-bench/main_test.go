package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/egress"
	"github.com/acp-gateway/acp-gateway/internal/bench"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// TestMain serves the bench's helpers as main does: the bench runs them
// as this executable, here the test binary, with a child mode as its
// first argument.
func TestMain(m *testing.M) {
	egress.ListenIfCommanded()
	if len(os.Args) > 1 && bench.IsChild(os.Args[1]) {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestBenchQuickReport runs the bench on a tiny workload through every path
// (websocketd and Redis when this machine has them) and checks the shape of
// the report and of its JSON. It asserts no timing.
func TestBenchQuickReport(t *testing.T) {
	testutil.Slow(t)
	// The bench's helpers are this test binary: under the race detector
	// each would pause a second as it exits.
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	jsonFile := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--quick", "--rounds", "2", "--updates", "40", "--paced-updates", "20", "--rate", "2000",
		"--fanout", "1,3", "--fanout-updates", "20", "--sessions", "3", "--scale-updates", "3",
		"--bomb-rounds", "1", "--bomb-samples", "3", "--rate-sessions", "2,3", "--rate-duration", "1s", "--rate-per-session", "5", "--json", jsonFile}, strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("bench exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "headline: gateway (bolt, connect+proto) ") {
		t.Fatalf("last line is not the headline: %q", last)
	}
	for _, want := range []string{"pipe (floor)", "websocketd", "gateway memory connect+json", "gateway memory connect+proto",
		"gateway memory grpc", "gateway memory acp", "gateway bolt connect+proto", "gateway bolt connect+json", "gateway redis connect+proto", "watchers", "scale: 3 sessions"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the report does not mention %q:\n%s", want, stdout.String())
		}
	}

	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Machine struct {
			CPUs int `json:"cpus"`
		} `json:"machine"`
		Paths []struct {
			Key              string  `json:"key"`
			Gateway          bool    `json:"gateway"`
			Present          bool    `json:"present"`
			Absent           string  `json:"absent"`
			Error            string  `json:"error"`
			Updates          int     `json:"updates"`
			UpdatesPerSecond float64 `json:"updatesPerSecond"`
			Latency          struct {
				Samples int `json:"samples"`
			} `json:"latencyMs"`
			VsPipe *struct {
				Throughput float64 `json:"throughput"`
			} `json:"vsPipe"`
			AllocBytesPerUpdate float64   `json:"allocBytesPerUpdate"`
			AllocsPerUpdate     float64   `json:"allocsPerUpdate"`
			RoundRates          []float64 `json:"roundUpdatesPerSecond"`
		} `json:"paths"`
		Fanout []struct {
			Watchers int    `json:"watchers"`
			Error    string `json:"error"`
			Latency  struct {
				Samples int `json:"samples"`
			} `json:"latencyMs"`
			WatchersNice    int     `json:"watchersNice"`
			AgentRunPct     float64 `json:"agentRunPercent"`
			AgentCPUWaitPct float64 `json:"agentCPUWaitPercent"`
			AgentBlockedPct float64 `json:"agentBlockedPercent"`
		} `json:"fanout"`
		Scale        *scaleJSON `json:"scale"`
		ScaleSandbox *scaleJSON `json:"scaleSandbox"`
		Bombs        []struct {
			Throttle         string `json:"throttle"`
			AuthFailureLimit int    `json:"authFailureLimit"`
			Bombers          int    `json:"bombers"`
			BombBytes        int    `json:"bombBytes"`
			Rounds           []struct {
				Quiet, Control, Bombed struct {
					GetSession struct {
						Samples int `json:"samples"`
					} `json:"getSessionMs"`
					PeakRSS int64 `json:"peakRssBytes"`
				}
			} `json:"rounds"`
			Control, Bombed struct {
				Refused map[string]int `json:"refused"`
			}
			GetP50Ratio float64 `json:"getSessionP50Ratio"`
			Leftover    int     `json:"leftoverChildren"`
			Error       string  `json:"error"`
		} `json:"bombs"`
		Rate []struct {
			Sessions      int     `json:"sessions"`
			Updates       int     `json:"updates"`
			Expected      int     `json:"expectedUpdates"`
			Failed        int     `json:"failedSessions"`
			Leftover      int     `json:"leftoverChildren"`
			Error         string  `json:"error"`
			Met           bool    `json:"met"`
			CPUPerSession float64 `json:"cpuPerSession"`
			RSSPerSession float64 `json:"rssBytesPerSession"`
			Latency       struct {
				Samples int `json:"samples"`
			} `json:"latencyMs"`
		} `json:"rate"`
		Leftover int    `json:"leftoverProcesses"`
		Headline string `json:"headline"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("the JSON does not parse: %v\n%s", err, raw)
	}
	if rep.Machine.CPUs < 1 || rep.Headline != lines[len(lines)-1] {
		t.Errorf("machine %+v, headline %q", rep.Machine, rep.Headline)
	}
	var keys []string
	for _, p := range rep.Paths {
		keys = append(keys, p.Key)
		switch {
		case p.Error != "":
			t.Errorf("path %s failed: %s", p.Key, p.Error)
		case !p.Present:
			if p.Absent == "" || (p.Key != "websocketd" && p.Key != "redis") {
				t.Errorf("path %s absent without a reason it may have: %q", p.Key, p.Absent)
			}
		case p.Updates != 40 || p.UpdatesPerSecond <= 0 || p.Latency.Samples != 20 || len(p.RoundRates) != 2:
			t.Errorf("path %s: %d updates at %v/s, %d latency samples, rounds' rates %v", p.Key, p.Updates, p.UpdatesPerSecond, p.Latency.Samples, p.RoundRates)
		case p.Gateway && (p.AllocBytesPerUpdate <= 0 || p.AllocsPerUpdate <= 0):
			t.Errorf("gateway path %s: %v heap bytes and %v objects allocated per update", p.Key, p.AllocBytesPerUpdate, p.AllocsPerUpdate)
		}
		if p.Key == "proto" && p.VsPipe == nil {
			t.Errorf("the gateway path has no ratio to the pipe")
		}
	}
	if got := strings.Join(keys, ","); got != "pipe,websocketd,json,proto,grpc,nogzip,deltas,acp,bolt,boltjson,redis" {
		t.Errorf("paths %s", got)
	}
	if len(rep.Fanout) != 2 || rep.Fanout[0].Watchers != 1 || rep.Fanout[1].Watchers != 3 || rep.Fanout[0].Error != "" || rep.Fanout[1].Error != "" {
		t.Errorf("fan-out %+v", rep.Fanout)
	}
	for _, f := range rep.Fanout {
		// Every watcher saw every update, from a process at the lowest
		// CPU priority (standing in for clients on other machines).
		if f.Latency.Samples != f.Watchers*20 || f.WatchersNice != 19 {
			t.Errorf("fan-out to %d watchers: %d latency samples, watchers at nice %d", f.Watchers, f.Latency.Samples, f.WatchersNice)
		}
		// The agent's own threads were found and read, and its time split
		// into shares of one whole (this 20-update turn is mostly the
		// prompt's start and end).
		shares := []float64{f.AgentRunPct, f.AgentCPUWaitPct, f.AgentBlockedPct}
		if sum := f.AgentRunPct + f.AgentCPUWaitPct + f.AgentBlockedPct; f.AgentRunPct <= 0 || slices.Max(shares) > 100 || slices.Min(shares) < 0 || math.Abs(sum-100) > 0.01 {
			t.Errorf("fan-out to %d watchers: the agent's run/CPU wait/blocked shares are %v%%", f.Watchers, shares)
		}
	}
	if rep.Scale == nil || rep.Scale.Sessions != 3 || rep.Scale.Store != "bolt" || rep.Scale.Sandbox != "none" || rep.Scale.Failed != 0 || rep.Scale.Leftover != 0 || rep.Scale.Error != "" ||
		rep.Scale.CreateToFirstEvent.Samples != 3 {
		t.Errorf("scale %+v", rep.Scale)
	}
	// The scale phase ran again with the agents sandboxed, side by side; a
	// host without bwrap or a writable cgroup says why in its result.
	switch s := rep.ScaleSandbox; {
	case s == nil || s.Sessions != 3 || s.Sandbox != "bwrap":
		t.Errorf("sandboxed scale %+v", s)
	case s.Error != "":
		t.Logf("the sandboxed scale phase could not run here: %s", s.Error)
		if !strings.Contains(stdout.String(), "  error: ") {
			t.Errorf("the report does not say the sandboxed scale phase failed:\n%s", stdout.String())
		}
	case s.Failed != 0 || s.Leftover != 0 || s.CreateToFirstEvent.Samples != 3 || s.Network != "proxy" || !strings.Contains(s.Limits, "memory 4 GiB"):
		t.Errorf("sandboxed scale %+v", s)
	}
	for _, want := range []string{"create to first event, without and with the sandbox", "unconfined (--sandbox none)", "bwrap + limits (--sandbox bwrap --sandbox-network proxy)"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the report does not mention %q:\n%s", want, stdout.String())
		}
	}
	// The bombs phase ran with the throttle off, where every bomb is
	// refused as unauthenticated, then at its default, where most are
	// refused as throttled; none is let in.
	if len(rep.Bombs) != 2 || rep.Bombs[0].Throttle != "off" || rep.Bombs[0].AuthFailureLimit != -1 ||
		rep.Bombs[1].Throttle != "default" || rep.Bombs[1].AuthFailureLimit != 10 {
		t.Fatalf("bombs %+v", rep.Bombs)
	}
	for _, b := range rep.Bombs {
		refused := b.Bombed.Refused
		switch {
		case b.Error != "" || b.Leftover != 0 || b.Bombers != 50 || b.BombBytes < 1<<20-64<<10 || b.BombBytes > 1<<20:
			t.Errorf("bombs (throttle %s): %+v", b.Throttle, b)
		case len(b.Rounds) != 1 || b.Rounds[0].Quiet.GetSession.Samples != 3 || b.Rounds[0].Bombed.GetSession.Samples != 3 ||
			b.Rounds[0].Control.GetSession.Samples != 3 || b.Control.Refused["unauthenticated"] == 0 ||
			b.Rounds[0].Quiet.PeakRSS <= 0 || b.GetP50Ratio <= 0:
			t.Errorf("bombs (throttle %s): rounds %+v, ratio %v", b.Throttle, b.Rounds, b.GetP50Ratio)
		case refused["ok"] != 0:
			t.Errorf("bombs (throttle %s): %d bombs were let in", b.Throttle, refused["ok"])
		case b.Throttle == "off" && (refused["unauthenticated"] == 0 || len(refused) != 1):
			t.Errorf("bombs (throttle off): answered %v", refused)
		case b.Throttle == "default" && refused["resource_exhausted"] == 0:
			t.Errorf("bombs (throttle default): answered %v, none throttled", refused)
		}
	}
	if !strings.Contains(stdout.String(), "bombs, throttle default (--auth-failure-limit 10): 50 unauthenticated requests at once") {
		t.Errorf("the report does not show the bombs phase:\n%s", stdout.String())
	}
	// The many-sessions phase: every session's every update reached its
	// client once; the second step runs only if the first met the target.
	if len(rep.Rate) == 0 || (rep.Rate[0].Met && len(rep.Rate) != 2) || (!rep.Rate[0].Met && len(rep.Rate) != 1) {
		t.Errorf("rate steps %+v", rep.Rate)
	}
	for i, r := range rep.Rate {
		if n := 2 + i; r.Sessions != n || r.Expected != n*5 || r.Updates != r.Expected || r.Latency.Samples != r.Updates ||
			r.Failed != 0 || r.Leftover != 0 || r.Error != "" || r.CPUPerSession <= 0 {
			t.Errorf("rate step %d: %+v", i, r)
		}
	}
	if !strings.Contains(stdout.String(), "many sessions at a realistic rate") {
		t.Errorf("the report does not show the many-sessions phase:\n%s", stdout.String())
	}
	if rep.Leftover != 0 {
		t.Errorf("%d processes of the run outlived it", rep.Leftover)
	}
}

// scaleJSON is a scale phase's result in the bench's JSON.
type scaleJSON struct {
	Sessions           int    `json:"sessions"`
	Store              string `json:"store"`
	Sandbox            string `json:"sandbox"`
	Network            string `json:"network"`
	Limits             string `json:"limits"`
	Failed             int    `json:"failedSessions"`
	Leftover           int    `json:"leftoverChildren"`
	Error              string `json:"error"`
	CreateToFirstEvent struct {
		Samples int `json:"samples"`
	} `json:"createToFirstEventMs"`
}

func TestBenchBadFlagsExit2(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--mix", "3"},
		{"--scale-store", "redis"},
		{"--scale-sandbox", "gvisor"},
		{"--scale-network", "none"},
		{"--paths", "pigeon"},
		{"--fanout", "x"},
		{"--bomb-throttle", "sometimes"},
		{"--bombers-nice", "20"},
		{"extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, code, exitUsage, stderr.String())
		}
	}
}

// The bench writes the profiles asked for, of the gateway process serving
// the profiled path: each a gzipped pprof protobuf.
func TestBenchWritesProfiles(t *testing.T) {
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	dir := t.TempDir()
	files := map[string]string{}
	args := []string{"--quick", "--rounds", "1", "--paths", "proto", "--updates", "40", "--paced-updates", "20",
		"--rate", "2000", "--fanout", "", "--sessions", "0", "--bombs", "0", "--profile-path", "proto"}
	for _, kind := range []string{"cpuprofile", "memprofile", "mutexprofile"} {
		files[kind] = filepath.Join(dir, kind+".pb.gz")
		args = append(args, "--"+kind, files[kind])
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("bench exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	for kind, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("--%s: %v", kind, err)
			continue
		}
		if len(data) < 20 || data[0] != 0x1f || data[1] != 0x8b {
			t.Errorf("--%s wrote %d bytes, not a gzipped profile", kind, len(data))
		}
	}
}
