// Command acp-gateway-bench measures the gateway against a plain pipe and
// websocketd on one synthetic agent workload, then fan-out to many
// watchers, many sessions, and another user's latency under
// unauthenticated gzip bombs (docs/BENCHMARKS.md).
//
//	acp-gateway-bench [--quick] [--json FILE] [flags]
//
// It is a command of its own, so that the acp-gateway binary carries none
// of it. Its helpers (the synthetic agent, the measured gateway, the pipe
// reader, the watchers, the bombers) are this executable run as
// `acp-gateway-bench MODE`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/acp-gateway/acp-gateway/gateway/egress"
	"github.com/acp-gateway/acp-gateway/internal/bench"
)

const benchUsage = `usage: acp-gateway-bench [--quick] [--json FILE] [flags]

Measures the gateway against a plain pipe and websocketd on one synthetic
agent workload, then fan-out to many watchers, many sessions, and another
user's latency under unauthenticated gzip bombs. Flags:
`

// exitUsage is the exit status for bad flags.
const exitUsage = 2

func main() {
	// In a sandboxed agent of the measured gateway, this binary opens the
	// egress proxy's socket and then runs the agent.
	egress.ListenIfCommanded()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the bench, or with a child mode as its first argument that
// helper.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && bench.IsChild(args[0]) {
		return bench.Child(ctx, args[0], args[1:], stdin, stdout, stderr)
	}
	return benchCmd(ctx, args, stdout, stderr)
}

// benchCmd parses the bench's flags, runs it and writes its report.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("acp-gateway-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	full := bench.Defaults(false)
	quick := fs.Bool("quick", false, "a smaller run that finishes in under 45 seconds")
	jsonFile := fs.String("json", "", "also write the results as JSON to this file")
	updates := fs.Int("updates", full.Updates, "updates per path, as fast as possible, split over --mix (quick: 4000)")
	rate := fs.Float64("rate", full.Rate, "updates per second of the paced turns that measure latency (0: latency of the fast turns)")
	paced := fs.Int("paced-updates", full.PacedUpdates, "updates per path at --rate (quick: 2000)")
	payload := fs.Int("payload", full.Payload, "bytes of text in a tool-call content chunk (message chunks a quarter, diffs 4x)")
	mix := fs.String("mix", "1,2", "ACP protocol versions of the agent, one turn each")
	paths := fs.String("paths", strings.Join(bench.PathKeys, ","), "paths to measure")
	rounds := fs.Int("rounds", full.Rounds, "times the paths run, in turn; each reports its median round (quick: 1)")
	fanout := fs.String("fanout", "1,10,100,1000", "Watch stream counts of the fan-out phase (empty: skip)")
	fanoutUpdates := fs.Int("fanout-updates", full.FanoutUpdates, "updates of the fan-out turn (quick: 300)")
	sessions := fs.Int("sessions", full.Sessions, "concurrent sessions of the scale phase (0: skip; quick: 100)")
	scaleUpdates := fs.Int("scale-updates", full.ScaleUpdates, "updates per turn in the scale phase (quick: 10)")
	scaleConc := fs.Int("scale-concurrency", full.ScaleConcurrency, "sessions created at a time in the scale phase")
	scaleStore := fs.String("scale-store", full.ScaleStore, "store of the scale phase: bolt (serve's default) or memory (event logs in the gateway's heap)")
	scaleSandbox := fs.String("scale-sandbox", full.ScaleSandbox, "agents of the scale phase: none (unconfined), bwrap (each in a bubblewrap sandbox under the default --agent-* limits, as serve with authentication runs them) or both, for their create-to-first-event latency side by side")
	scaleNetwork := fs.String("scale-network", full.ScaleNetwork, "network of the scale phase's sandboxed agents, as serve's --sandbox-network: proxy (serve's default: a network of their own, out only through the egress proxy) or host")
	rateSessions := fs.String("rate-sessions", "1000", "steps of the many-sessions phase, in sessions running at once, e.g. 100,250,500,1000: each on a gateway of its own, until one misses p99 < 50 ms (empty: skip; quick: 50)")
	ratePer := fs.Float64("rate-per-session", full.RatePerSession, "updates per second each agent of the many-sessions phase writes")
	rateDuration := fs.Duration("rate-duration", full.RateDuration, "how long each agent of the many-sessions phase writes (quick: 5s)")
	rateStore := fs.String("rate-store", full.RateStore, "store of the many-sessions phase: bolt (serve's default) or memory (to tell the store's share of the latency)")
	bombs := fs.Int("bombs", full.Bombs, "unauthenticated gzip bombs (a wrong token, 1 MiB inflating to 1 GiB) in flight at once in the bombs phase, while another user's calls are timed (0: skip)")
	bombRounds := fs.Int("bomb-rounds", full.BombRounds, "rounds of the bombs phase, each a window without bombs then one with them (quick: 2)")
	bombSamples := fs.Int("bomb-samples", full.BombSamples, "the other user's GetSession calls and Prompt turns per window of the bombs phase (quick: 30)")
	bombThrottle := fs.String("bomb-throttle", full.BombThrottle, "the bombs phase gateway's --auth-failure-limit: off (-1: every bomb reaches the token check), default, or both, one run after the other")
	bombersNice := fs.Int("bombers-nice", full.BombersNice, "CPU priority of the bombs phase's bombers: 19 (the lowest) stands in for clients on other machines; 0 lets them take the gateway's CPU share too")
	redisURL := fs.String("redis", full.Redis, "Redis for the Redis store path (a random key prefix, deleted afterwards)")
	websocketd := fs.String("websocketd", "", "websocketd binary (default: websocketd in PATH)")
	cpuprofile := fs.String("cpuprofile", "", "write the gateway process's CPU profile during --profile-path to this file")
	memprofile := fs.String("memprofile", "", "write the gateway process's allocation profile after --profile-path to this file")
	mutexprofile := fs.String("mutexprofile", "", "write the gateway process's mutex contention profile of --profile-path to this file")
	profilePath := fs.String("profile-path", full.ProfilePath, "what is profiled: "+strings.Join(bench.ProfilePaths(), ", "))
	timeout := fs.Duration("timeout", full.Timeout, "bound on the whole run (quick: 2m)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "acp-gateway-bench: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	cfg := bench.Defaults(*quick)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	pick := func(name string, dst *int, v int) {
		if set[name] {
			*dst = v
		}
	}
	pick("updates", &cfg.Updates, *updates)
	pick("paced-updates", &cfg.PacedUpdates, *paced)
	pick("rounds", &cfg.Rounds, *rounds)
	pick("payload", &cfg.Payload, *payload)
	pick("fanout-updates", &cfg.FanoutUpdates, *fanoutUpdates)
	pick("sessions", &cfg.Sessions, *sessions)
	pick("scale-updates", &cfg.ScaleUpdates, *scaleUpdates)
	pick("scale-concurrency", &cfg.ScaleConcurrency, *scaleConc)
	pick("bombs", &cfg.Bombs, *bombs)
	pick("bomb-rounds", &cfg.BombRounds, *bombRounds)
	pick("bomb-samples", &cfg.BombSamples, *bombSamples)
	pick("bombers-nice", &cfg.BombersNice, *bombersNice)
	cfg.BombThrottle = *bombThrottle
	cfg.ScaleStore, cfg.ScaleSandbox, cfg.ScaleNetwork, cfg.RateStore = *scaleStore, *scaleSandbox, *scaleNetwork, *rateStore
	if set["rate"] {
		cfg.Rate = *rate
	}
	var err error
	if set["rate-per-session"] {
		cfg.RatePerSession = *ratePer
	}
	if set["rate-duration"] {
		cfg.RateDuration = *rateDuration
	}
	if set["rate-sessions"] {
		if cfg.RateSessions, err = intList(*rateSessions); err != nil {
			fmt.Fprintf(stderr, "acp-gateway-bench: --rate-sessions: %v\n", err)
			return exitUsage
		}
	}
	if set["timeout"] {
		cfg.Timeout = *timeout
	}
	if cfg.Mix, err = intList(*mix); err != nil {
		fmt.Fprintf(stderr, "acp-gateway-bench: --mix: %v\n", err)
		return exitUsage
	}
	if cfg.Fanout, err = intList(*fanout); err != nil {
		fmt.Fprintf(stderr, "acp-gateway-bench: --fanout: %v\n", err)
		return exitUsage
	}
	cfg.Paths = nil
	for _, p := range strings.Split(*paths, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Paths = append(cfg.Paths, p)
		}
	}
	cfg.Redis, cfg.Websocketd, cfg.ProfilePath = *redisURL, *websocketd, *profilePath
	for _, f := range []struct {
		dst *string
		v   string
	}{{&cfg.CPUProfile, *cpuprofile}, {&cfg.MemProfile, *memprofile}, {&cfg.MutexProfile, *mutexprofile}} {
		if f.v != "" {
			abs, err := filepath.Abs(f.v)
			if err != nil {
				fmt.Fprintf(stderr, "acp-gateway-bench: %v\n", err)
				return exitUsage
			}
			*f.dst = abs
		}
	}
	if err := cfg.Check(); err != nil {
		fmt.Fprintf(stderr, "acp-gateway-bench: %v\n", err)
		return exitUsage
	}
	rep, err := bench.Run(ctx, cfg, stderr)
	if rep == nil {
		fmt.Fprintf(stderr, "acp-gateway-bench: %v\n", err)
		return 1
	}
	if *jsonFile != "" {
		if err := rep.WriteJSON(*jsonFile); err != nil {
			fmt.Fprintf(stderr, "acp-gateway-bench: --json: %v\n", err)
			return 1
		}
	}
	rep.Write(stdout)
	if err != nil {
		fmt.Fprintf(stderr, "acp-gateway-bench: %v\n", err)
		return 1
	}
	return 0
}

// intList parses a comma-separated list of integers; empty is none.
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
