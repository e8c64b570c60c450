package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acp-gateway/acp-gateway/gateway/sandbox"
	"github.com/acp-gateway/acp-gateway/statestore/redisstore"
)

// Path keys, the values of Config.Paths, in the order they run.
// "bolt" and "boltjson" are serve's default configuration (the bolt
// store) with Connect binary and Connect JSON clients: the headline's.
var PathKeys = []string{"pipe", "websocketd", "json", "proto", "grpc", "nogzip", "deltas", "acp", "bolt", "boltjson", "redis"}

// ProfilePaths are the values of Config.ProfilePath: the gateway paths
// (every path key but the pipe and websocketd), fanout, scale and rate
// (the many-sessions phase's last step).
func ProfilePaths() []string {
	return slices.Concat(slices.DeleteFunc(slices.Clone(PathKeys), func(k string) bool { return k == "pipe" || k == "websocketd" }),
		[]string{"fanout", "scale", "rate"})
}

// Config is a bench run's settings.
type Config struct {
	// Updates is the size of a path's as-fast-as-possible workload, split
	// evenly over the Mix protocols (one turn each).
	Updates int `json:"updates"`
	// Rate and PacedUpdates are the paced workload measuring latency;
	// Rate 0 skips it (latency is then the flood's).
	Rate         float64 `json:"rate"`
	PacedUpdates int     `json:"pacedUpdates"`
	// Payload scales the updates' text (see Workload).
	Payload int `json:"payload"`
	// Mix lists the ACP protocol versions of the agents (1, 2).
	Mix []int `json:"mix"`
	// Paths selects the paths (PathKeys).
	Paths []string `json:"paths"`
	// Rounds is how many times the paths run, one after the other in each
	// round; each path reports its median round (see medianPaths).
	Rounds int `json:"rounds"`
	// Fanout lists the watcher counts of the fan-out phase; FanoutUpdates
	// is its turn's size: 10,000 updates, about 6 MB, so that the agent's
	// rate is more than what its 1 MiB output pipe takes at once.
	Fanout        []int `json:"fanout"`
	FanoutUpdates int   `json:"fanoutUpdates"`
	// Sessions, ScaleUpdates and ScaleConcurrency shape the scale phase
	// (Sessions 0 skips it).
	Sessions         int `json:"sessions"`
	ScaleUpdates     int `json:"scaleUpdates"`
	ScaleConcurrency int `json:"scaleConcurrency"`
	// ScaleStore is the scale phase's store: "bolt", serve's default, or
	// "memory", which keeps the sessions' event logs in the gateway's heap.
	ScaleStore string `json:"scaleStore"`
	// ScaleSandbox is how the scale phase's agents run: "none"
	// (unconfined), "bwrap" (each in a bubblewrap sandbox under the default
	// limits, as an authenticated serve runs them), or "both", one run
	// after the other, each on a gateway of its own, for their
	// create-to-first-event latency side by side. Profiling "scale"
	// profiles the first. ScaleNetwork is the sandboxed agents' network,
	// as serve's --sandbox-network: "proxy" (serve's default: a network
	// namespace of its own, out only through the egress proxy) or "host".
	ScaleSandbox string `json:"scaleSandbox"`
	ScaleNetwork string `json:"scaleNetwork"`
	// RateSessions are the steps of the many-sessions phase (empty skips
	// it): each runs that many sessions at once, each agent writing
	// RatePerSession updates a second for RateDuration, on the bolt store,
	// a Connect JSON client per session.
	RateSessions   []int         `json:"rateSessions"`
	RatePerSession float64       `json:"ratePerSession"`
	RateDuration   time.Duration `json:"rateDuration"`
	// RateStore is the phase's store: "bolt", serve's default and the
	// target's, or "memory", to tell the store's share of the latency.
	RateStore string `json:"rateStore"`
	// Bombs is how many unauthenticated gzip bombs the bombs phase keeps
	// in flight at once (0 skips it); BombRounds its rounds, each a window
	// without bombs and one with them; BombSamples the user's GetSession
	// calls and Prompt turns per window; BombThrottle the gateway's
	// --auth-failure-limit: "off" (-1: every bomb reaches the token
	// check), "default", or "both", one run after the other.
	Bombs        int    `json:"bombs"`
	BombRounds   int    `json:"bombRounds"`
	BombSamples  int    `json:"bombSamples"`
	BombThrottle string `json:"bombThrottle"`
	// BombersNice is the bombers' CPU priority: 19, the lowest, has them
	// stand in for clients on other machines, as the fan-out's watchers
	// do; 0 has them take the gateway's and the user's CPU share too.
	BombersNice int `json:"bombersNice"`
	// Redis is the Redis store's URL; a random key prefix is used and its
	// keys deleted afterwards.
	Redis string `json:"redis"`
	// Websocketd is the websocketd binary; empty looks it up in PATH.
	Websocketd string `json:"websocketd,omitempty"`
	// CPUProfile, MemProfile and MutexProfile are written by the gateway
	// process during ProfilePath (a gateway path key).
	CPUProfile   string `json:"cpuProfile,omitempty"`
	MemProfile   string `json:"memProfile,omitempty"`
	MutexProfile string `json:"mutexProfile,omitempty"`
	ProfilePath  string `json:"profilePath,omitempty"`
	// Timeout bounds the whole run.
	Timeout time.Duration `json:"timeout"`
	// Quick marks the --quick settings.
	Quick bool `json:"quick"`
}

// Defaults returns the full run's settings, or the quick run's.
func Defaults(quick bool) Config {
	c := Config{
		Updates: 100000, Rate: 2000, PacedUpdates: 10000, Payload: DefaultPayload, Mix: []int{1, 2},
		Paths: PathKeys, Rounds: 3, Fanout: []int{1, 10, 100, 1000}, FanoutUpdates: 10000,
		RateSessions: []int{1000}, RatePerSession: 20, RateDuration: time.Minute, RateStore: "bolt",
		Sessions: 1000, ScaleUpdates: 20, ScaleConcurrency: 32, ScaleStore: "bolt", ScaleSandbox: ScaleSandboxBoth, ScaleNetwork: "proxy",
		Bombs: 50, BombRounds: 5, BombSamples: 200, BombThrottle: BombThrottleBoth, BombersNice: watchersNice,
		Redis: "redis://127.0.0.1:6379/12", ProfilePath: "proto", Timeout: 20 * time.Minute,
	}
	if quick {
		c.Quick = true
		c.Rounds = 1
		c.Updates, c.PacedUpdates, c.FanoutUpdates = 4000, 2000, 300
		c.Sessions, c.ScaleUpdates = 100, 10
		c.RateSessions, c.RateDuration = []int{50}, 5*time.Second
		c.BombRounds, c.BombSamples = 2, 30
		c.Timeout = 2 * time.Minute
	}
	return c
}

// Check reports what is wrong with c.
func (c *Config) Check() error {
	for _, v := range c.Mix {
		if v != 1 && v != 2 {
			return fmt.Errorf("--mix: protocol version %d (want 1 or 2)", v)
		}
	}
	if len(c.Mix) == 0 {
		return errors.New("--mix: name at least one protocol version")
	}
	for _, p := range c.Paths {
		if !slices.Contains(PathKeys, p) {
			return fmt.Errorf("--paths: unknown path %q (known: %s)", p, strings.Join(PathKeys, ","))
		}
	}
	if c.Rounds < 1 || c.Rounds > 20 {
		return fmt.Errorf("--rounds: %d (want 1 to 20)", c.Rounds)
	}
	if c.Updates < len(c.Mix) || c.PacedUpdates < 0 || c.Rate < 0 || c.Payload < 0 || c.FanoutUpdates < 1 ||
		c.Sessions < 0 || c.ScaleUpdates < 1 || c.ScaleConcurrency < 1 {
		return errors.New("the workload sizes must be positive (--updates at least one per --mix version)")
	}
	for _, n := range c.Fanout {
		if n < 1 || n > 10000 {
			return fmt.Errorf("--fanout: %d watchers (want 1 to 10000)", n)
		}
	}
	for _, n := range c.RateSessions {
		if n < 1 || n > 10000 {
			return errNoRateSteps
		}
	}
	if len(c.RateSessions) > 0 && (c.RatePerSession <= 0 || c.RatePerSession > 1000 || c.RateDuration < time.Second ||
		c.RatePerSession*c.RateDuration.Seconds() < 1) {
		return errors.New("--rate-per-session (above 0, at most 1000) and --rate-duration (at least 1s) must give each turn an update")
	}
	if c.RateStore != "bolt" && c.RateStore != "memory" {
		return fmt.Errorf("--rate-store: %q (want bolt or memory)", c.RateStore)
	}
	if c.ScaleStore != "bolt" && c.ScaleStore != "memory" {
		return fmt.Errorf("--scale-store: %q (want bolt or memory)", c.ScaleStore)
	}
	if !slices.Contains(ScaleSandboxes, c.ScaleSandbox) {
		return fmt.Errorf("--scale-sandbox: %q (want %s)", c.ScaleSandbox, strings.Join(ScaleSandboxes, ", "))
	}
	if c.ScaleNetwork != "proxy" && c.ScaleNetwork != "host" {
		return fmt.Errorf("--scale-network: %q (want proxy or host)", c.ScaleNetwork)
	}
	if c.Bombs < 0 || c.Bombs > 1000 {
		return fmt.Errorf("--bombs: %d (want 0 to 1000)", c.Bombs)
	}
	if c.BombRounds < 1 || c.BombRounds > 20 || c.BombSamples < 1 || c.BombSamples > 10000 {
		return fmt.Errorf("--bomb-rounds %d, --bomb-samples %d: want 1 to 20 rounds and 1 to 10000 samples", c.BombRounds, c.BombSamples)
	}
	if c.BombersNice < 0 || c.BombersNice > 19 {
		return fmt.Errorf("--bombers-nice: %d (want 0 to 19)", c.BombersNice)
	}
	if !slices.Contains(BombThrottles, c.BombThrottle) {
		return fmt.Errorf("--bomb-throttle: %q (want %s)", c.BombThrottle, strings.Join(BombThrottles, ", "))
	}
	if c.Sessions > 10000 {
		return fmt.Errorf("--sessions: %d (at most 10000)", c.Sessions)
	}
	if c.ProfilePath != "" && !slices.Contains(ProfilePaths(), c.ProfilePath) {
		return fmt.Errorf("--profile-path: unknown %q", c.ProfilePath)
	}
	if c.Timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	return nil
}

// Child modes, run as `acp-gateway-bench MODE`: the synthetic agent, the
// measured gateway, the pipe reader, the fan-out watchers, the bombs
// phase's bombers.
var childModes = []string{"agent", "gateway", "pipe", "watchers", "bombers"}

// IsChild reports whether mode is a child mode of the bench.
func IsChild(mode string) bool { return slices.Contains(childModes, mode) }

// Child runs child mode mode with its arguments and returns the exit
// status.
func Child(ctx context.Context, mode string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch mode {
	case "agent":
		fs := flag.NewFlagSet("bench agent", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.String("run", "", "bench run id (marks the process)")
		protocol := fs.Int("protocol", 0, "ACP protocol version to answer, 1 or 2 (default: protocol=N in $QUERY_STRING, else 2)")
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if *protocol == 0 {
			*protocol = 2
			if q := os.Getenv("QUERY_STRING"); strings.HasPrefix(q, "protocol=") {
				*protocol, _ = strconv.Atoi(strings.TrimPrefix(q, "protocol="))
			}
		}
		// A write to a closed stdout fails rather than kills.
		signal.Ignore(syscall.SIGPIPE)
		if err := ServeAgent(ctx, stdin, stdout, *protocol); err != nil {
			fmt.Fprintln(stderr, "bench agent:", err)
			return 1
		}
		return 0
	case "gateway":
		return serveGateway(ctx, args, stdin, stdout, stderr)
	case "pipe":
		return servePipe(ctx, args, stdout, stderr)
	case "watchers":
		return serveWatchers(ctx, args, stdout, stderr)
	case "bombers":
		return serveBombers(ctx, args, stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "bench: unknown child mode %q\n", mode)
	return 2
}

// selfCommand is the command that runs the bench's child modes: this
// executable, acp-gateway-bench (or a test binary whose TestMain
// dispatches them as its main does).
func selfCommand() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{exe}, nil
}

// Run runs the bench and returns its report. progress receives a line per
// step. Paths that cannot run (websocketd or Redis missing) are marked
// absent; the others still run.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	say := func(format string, args ...any) {
		fmt.Fprintf(progress, "bench: %5.1fs "+format+"\n", append([]any{time.Since(started).Seconds()}, args...)...)
	}
	self, err := selfCommand()
	if err != nil {
		return nil, err
	}
	var idb [6]byte
	_, _ = rand.Read(idb[:])
	runID := hex.EncodeToString(idb[:])
	tmp, err := os.MkdirTemp("", "acp-gateway-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cwd := filepath.Join(tmp, "cwd")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		return nil, err
	}
	wsd := cfg.Websocketd
	if wsd == "" {
		wsd = "websocketd"
	}
	wsd, _ = exec.LookPath(wsd) // "" when missing
	rep := &Report{Machine: machine(wsd), Config: cfg}
	tr := newTransports()
	defer tr.close()

	flood, paced := cfg.turns()
	want := func(key string) bool { return slices.Contains(cfg.Paths, key) }

	// profiled says whether one of keys is the profiled phase; profFlags
	// are then the profile flags of the gateway serving it.
	profiling := cfg.CPUProfile != "" || cfg.MemProfile != "" || cfg.MutexProfile != ""
	profiled := func(keys ...string) bool {
		return profiling && slices.Contains(keys, cfg.ProfilePath)
	}
	profFlags := func(keys ...string) []string {
		var extra []string
		if profiled(keys...) && cfg.CPUProfile != "" {
			extra = append(extra, "--cpuprofile", cfg.CPUProfile)
		}
		if profiled(keys...) && cfg.MemProfile != "" {
			extra = append(extra, "--memprofile", cfg.MemProfile)
		}
		if profiled(keys...) && cfg.MutexProfile != "" {
			extra = append(extra, "--mutexprofile", cfg.MutexProfile)
		}
		return extra
	}
	if profiling && !want(cfg.ProfilePath) &&
		(cfg.ProfilePath != "fanout" || len(cfg.Fanout) == 0) && (cfg.ProfilePath != "scale" || cfg.Sessions == 0) &&
		(cfg.ProfilePath != "rate" || len(cfg.RateSessions) == 0) {
		say("--profile-path %s is not run: no profile is written", cfg.ProfilePath)
	}
	// The paths run in rounds, so that a machine whose speed drifts (a
	// shared host) weighs on every path alike; each reports its median
	// round.
	var rounds [][]PathResult
	for round := range cfg.Rounds {
		if ctx.Err() != nil || len(cfg.Paths) == 0 {
			break
		}
		if cfg.Rounds > 1 {
			say("round %d of %d", round+1, cfg.Rounds)
		}
		var got []PathResult
		if want("pipe") {
			p := PathResult{Name: "pipe (floor)", Key: "pipe", Present: true, Measured: "reader process (getrusage, VmHWM)"}
			say("pipe: %d + %d updates through a pipe and a decoding reader", cfg.Updates, cfg.PacedUpdates)
			res, err := runPipe(ctx, self, runID, append(append([]turnSpec{}, flood...), paced...))
			if err != nil {
				p.Error = err.Error()
			} else {
				fillPath(&p, res.Turns[:len(flood)], res.Turns[len(flood):])
				p.PeakRSS = res.PeakRSS
			}
			got = append(got, p)
			say("%s", pathLine(p))
		}
		if want("websocketd") {
			p := PathResult{Name: "websocketd", Key: "websocketd", Measured: "websocketd process (/proc/PID/task/*/schedstat, VmHWM)"}
			if wsd == "" {
				p.Absent = "websocketd not installed (Debian: apt-get install websocketd)"
				fmt.Fprintln(progress, "bench: websocketd is MISSING (not found; Debian: apt-get install websocketd): its path is marked absent, the others run")
			} else {
				p.Present = true
				say("websocketd: %d + %d updates through %s and a WebSocket reader", cfg.Updates, cfg.PacedUpdates, wsd)
				runWebsocketd(ctx, &p, wsd, self, runID, flood, paced)
				say("%s", pathLine(p))
			}
			got = append(got, p)
		}
		// Each gateway path gets a gateway of its own, so that none inherits
		// another's sessions (the stores keep closed sessions' events).
		gatewayRun := func(key, store, storeURL, protocol string, extra ...string) {
			p := gatewayPath(key, store, protocol)
			// A path is profiled in the first round only.
			prof := profiled(key) && round == 0
			if prof {
				extra = append(extra, profFlags(key)...)
			}
			g, err := startGateway(ctx, self, runID, storeURL, extra...)
			if err != nil {
				p.Error = err.Error()
			} else {
				say("%s: %d + %d updates", p.Name, cfg.Updates, cfg.PacedUpdates)
				runGatewayPath(ctx, &p, g, tr, cwd, flood, paced, prof)
				if left, err := g.stop(tr); err != nil || left > 0 {
					say("%s: the gateway left %d children (%v)", p.Name, left, err)
					if p.Error == "" && left > 0 {
						p.Error = fmt.Sprintf("the gateway left %d agent processes at shutdown", left)
					}
				}
			}
			got = append(got, p)
			say("%s", pathLine(p))
		}
		for _, mp := range []struct{ key, protocol string }{
			{"json", protoConnectJSON}, {"proto", protoConnectProto}, {"grpc", protoGRPC}, {"nogzip", protoConnectIdentity},
			{"deltas", protoConnectDeltas}, {"acp", protoACP},
		} {
			if want(mp.key) {
				gatewayRun(mp.key, "memory", "memory:", mp.protocol)
			}
		}
		// A file per path and round: a gateway on the file of a round
		// before would recover its sessions, and write to a grown file.
		if want("bolt") {
			gatewayRun("bolt", "bolt", "bolt:"+filepath.Join(tmp, fmt.Sprintf("bench-%d.db", round)), protoConnectProto)
		}
		if want("boltjson") {
			gatewayRun("boltjson", "bolt", "bolt:"+filepath.Join(tmp, fmt.Sprintf("bench-json-%d.db", round)), protoConnectJSON)
		}
		if want("redis") {
			prefix := "acpgw-bench-" + runID + ":"
			if err := pingRedis(ctx, cfg.Redis); err != nil {
				p := gatewayPath("redis", "redis", protoConnectProto)
				p.Present, p.Absent = false, "Redis not reachable at "+cfg.Redis+": "+err.Error()
				say("Redis is MISSING (%v); that path is marked absent", err)
				got = append(got, p)
			} else {
				gatewayRun("redis", "redis", cfg.Redis, protoConnectProto, "--redis-prefix", prefix)
				if n, err := deleteRedisPrefix(context.WithoutCancel(ctx), cfg.Redis, prefix); err != nil {
					say("deleting the Redis keys %s*: %v", prefix, err)
				} else {
					say("deleted %d Redis keys %s*", n, prefix)
				}
			}
		}
		rounds = append(rounds, got)
	}
	rep.Paths = medianPaths(rounds)
	if len(cfg.Fanout) > 0 {
		g, err := startGateway(ctx, self, runID, "memory:", profFlags("fanout")...)
		if err != nil {
			rep.Fanout = []FanoutResult{{Error: err.Error()}}
		} else {
			stopProfile := g.profileWhile(ctx, profiled("fanout"), say)
			rep.Fanout = runFanout(ctx, self, runID, g, tr, &cfg, cwd, say)
			stopProfile()
			if left, err := g.stop(tr); err != nil || left > 0 {
				say("fan-out: the gateway left %d children (%v)", left, err)
			}
		}
	}
	if cfg.Sessions > 0 {
		// Without the sandbox and with it, each on a gateway and a store of
		// its own; the first is profiled.
		for i, mode := range cfg.scaleModes() {
			if ctx.Err() != nil {
				break
			}
			label := scaleLabel(mode)
			say("scale (%s): %d sessions of %d-update turns", label, cfg.Sessions, cfg.ScaleUpdates)
			storeURL := "memory:"
			if cfg.ScaleStore == "bolt" {
				storeURL = "bolt:" + filepath.Join(tmp, "scale-"+mode+".db")
			}
			var prof []string
			if i == 0 {
				prof = profFlags("scale")
			}
			s := runScale(ctx, self, runID, tr, &cfg, cwd, storeURL, mode, filepath.Join(tmp, "homes"), prof, say)
			if s.Error != "" {
				say("scale (%s): failed: %s", label, firstLine(s.Error))
			} else {
				say("scale (%s): create to first event p50 %.1f ms, p99 %.1f ms", label, s.CreateToFirstEvent.P50, s.CreateToFirstEvent.P99)
			}
			if mode == sandbox.ModeBwrap {
				rep.ScaleSandbox = &s
			} else {
				rep.Scale = &s
			}
		}
	}
	if len(cfg.RateSessions) > 0 {
		rep.Rate = runRate(ctx, self, runID, tr, &cfg, cwd, tmp, func() []string { return profFlags("rate") }, say)
	}
	if cfg.Bombs > 0 {
		for _, throttle := range cfg.bombThrottles() {
			if ctx.Err() != nil {
				break
			}
			say("bombs (throttle %s): %d unauthenticated gzip bombs at once, %d rounds of %d calls without and with them", throttle, cfg.Bombs, cfg.BombRounds, cfg.BombSamples)
			b := runBombs(ctx, self, runID, tr, &cfg, cwd, tmp, throttle, say)
			if b.Error != "" {
				say("bombs (throttle %s): failed: %s", throttle, firstLine(b.Error))
			} else {
				say("bombs (throttle %s): %s", throttle, b.verdict())
			}
			rep.Bombs = append(rep.Bombs, b)
		}
	}
	// Everything this run started is gone, or is ended now.
	left := runProcesses(runID)
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	rep.Leftover = len(left)
	rep.Seconds = round3(time.Since(started).Seconds())
	rep.finish()
	return rep, ctx.Err()
}

// turns returns the as-fast-as-possible and the paced turns of a path.
func (c *Config) turns() (flood, paced []turnSpec) {
	for i, v := range c.Mix {
		n := c.Updates / len(c.Mix)
		if i == 0 {
			n += c.Updates % len(c.Mix)
		}
		flood = append(flood, turnSpec{Protocol: v, Work: Workload{Updates: n, Payload: c.Payload}})
	}
	if c.Rate > 0 && c.PacedUpdates > 0 {
		for i, v := range c.Mix {
			n := c.PacedUpdates / len(c.Mix)
			if i == 0 {
				n += c.PacedUpdates % len(c.Mix)
			}
			if n > 0 {
				paced = append(paced, turnSpec{Protocol: v, Work: Workload{Updates: n, Payload: c.Payload, Rate: c.Rate}})
			}
		}
	}
	return flood, paced
}

// fillPath summarises a path's turns.
func fillPath(p *PathResult, flood, paced []turnResult) {
	var f, s summary
	for _, r := range flood {
		f.add(r)
	}
	for _, r := range paced {
		s.add(r)
	}
	p.Updates = f.updates
	p.UpdatesPerSecond = f.rate()
	p.CPUPer1000 = f.cpuPer1000()
	p.FloodLatency = latencyOf(f.samples)
	if len(paced) > 0 {
		p.Latency = latencyOf(s.samples)
	} else {
		p.Latency = p.FloodLatency
	}
	p.CutOffs = f.cutOffs + s.cutOffs
}

func pathLine(p PathResult) string {
	switch {
	case !p.Present:
		return p.Name + ": absent: " + p.Absent
	case p.Error != "":
		return p.Name + ": failed: " + p.Error
	}
	return fmt.Sprintf("%s: %.0f updates/s, p99 %.3f ms (flood p99 %.2f ms), %.3f CPU s/1k updates, peak RSS %s",
		p.Name, p.UpdatesPerSecond, p.Latency.P99, p.FloodLatency.P99, p.CPUPer1000, fmtBytes(float64(p.PeakRSS)))
}

func gatewayPath(key, store, protocol string) PathResult {
	transport := "HTTP/1.1"
	switch protocol {
	case protoGRPC:
		transport = "h2c"
	case protoACP:
		transport = "a WebSocket (HTTP/1.1 upgrade)"
	}
	return PathResult{
		Name: fmt.Sprintf("gateway %s %s", store, protocol), Key: key, Gateway: true, Store: store,
		Protocol: protocol + " over " + transport, Present: true, Measured: "gateway process (/proc/PID/task/*/schedstat, VmHWM)",
		client: protocol,
	}
}

func runWebsocketd(ctx context.Context, p *PathResult, wsd string, self []string, runID string, flood, paced []turnSpec) {
	w, err := startWebsocketd(ctx, wsd, self, runID)
	if err != nil {
		p.Error = err.Error()
		return
	}
	defer w.stop()
	resetPeakRSS(w.pid)
	one := func(t turnSpec) (turnResult, error) {
		r, err := wsTurn(ctx, w, t)
		if err != nil {
			err = fmt.Errorf("%v (websocketd: %s)", err, strings.TrimSpace(w.stderr.String()))
		}
		return r, err
	}
	fr, err := runTurns(flood, one)
	var pr []turnResult
	if err == nil {
		pr, err = runTurns(paced, one)
	}
	if err != nil {
		p.Error = err.Error()
		return
	}
	p.PeakRSS, _ = procStatus(w.pid, "VmHWM")
	fillPath(p, fr, pr)
}

func runGatewayPath(ctx context.Context, p *PathResult, g *gatewayProc, tr *transports, cwd string, flood, paced []turnSpec, profile bool) {
	c := tr.client(p.client, g.base, false)
	cpu := func() time.Duration {
		d, _ := procCPU(g.pid)
		return d
	}
	resetPeakRSS(g.pid)
	if profile {
		if err := g.profile(ctx, "start"); err != nil {
			p.Error = err.Error()
			return
		}
		defer func() {
			if err := g.profile(context.WithoutCancel(ctx), "stop"); err != nil && p.Error == "" {
				p.Error = err.Error()
			}
		}()
	}
	one := func(t turnSpec) (turnResult, error) {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		var r turnResult
		var err error
		if p.client == protoACP {
			r, err = acpTurn(tctx, g.base, t, cwd, cpu)
		} else {
			r, err = gatewayTurn(tctx, c, t.Protocol, t.Work, cwd, cpu)
		}
		if err != nil {
			err = fmt.Errorf("%v %s", err, strings.TrimSpace(g.stderr.String()))
		}
		return r, err
	}
	// The heap allocated during the as-fast-as-possible turns, as the CPU.
	before, err := g.memstats(ctx)
	var fr, pr []turnResult
	if err == nil {
		fr, err = runTurns(flood, one)
	}
	var after memStats
	if err == nil {
		after, err = g.memstats(ctx)
	}
	if err == nil {
		pr, err = runTurns(paced, one)
	}
	if err != nil {
		p.Error = err.Error()
		return
	}
	p.PeakRSS, _ = procStatus(g.pid, "VmHWM")
	fillPath(p, fr, pr)
	if p.Updates > 0 {
		p.AllocBytesPerUpdate = round3(float64(after.TotalAlloc-before.TotalAlloc) / float64(p.Updates))
		p.AllocsPerUpdate = round3(float64(after.Mallocs-before.Mallocs) / float64(p.Updates))
	}
}

// runTurns runs the turns through one, in order, and returns their
// results. It stops at the first error.
func runTurns(turns []turnSpec, one func(turnSpec) (turnResult, error)) ([]turnResult, error) {
	var out []turnResult
	for _, t := range turns {
		r, err := one(t)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func runFanout(ctx context.Context, self []string, runID string, g *gatewayProc, tr *transports, cfg *Config, cwd string, say func(string, ...any)) []FanoutResult {
	var out []FanoutResult
	w := Workload{Updates: cfg.FanoutUpdates, Payload: cfg.Payload}
	var one float64
	for _, n := range cfg.Fanout {
		if ctx.Err() != nil {
			break
		}
		say("fan-out: %d watchers, %d updates", n, w.Updates)
		r := fanout(ctx, self, runID, g, tr, n, w, cfg.Mix[len(cfg.Mix)-1], cwd)
		if n == 1 && r.Error == "" {
			one = r.AgentRate
		}
		if one > 0 {
			r.AgentVsOne = round3(r.AgentRate / one)
		}
		say("fan-out: %s", r)
		out = append(out, r)
	}
	return out
}

func pingRedis(ctx context.Context, url string) error {
	_, opts, err := redisstore.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

// deleteRedisPrefix deletes the keys starting with prefix.
func deleteRedisPrefix(ctx context.Context, url, prefix string) (int, error) {
	_, opts, err := redisstore.ParseURL(url)
	if err != nil {
		return 0, err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n := 0
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := rdb.Del(ctx, batch...).Err(); err != nil {
				return n, err
			}
			n += len(batch)
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return n, err
	}
	if len(batch) > 0 {
		if err := rdb.Del(ctx, batch...).Err(); err != nil {
			return n, err
		}
		n += len(batch)
	}
	return n, nil
}

// WriteJSON writes r to path as indented JSON.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
