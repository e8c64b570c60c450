package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/egress"
	"github.com/acp-gateway/acp-gateway/gateway/limits"
	"github.com/acp-gateway/acp-gateway/gateway/sandbox"
	"github.com/acp-gateway/acp-gateway/gateway/service"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	"github.com/acp-gateway/acp-gateway/gateway/workspace"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storeurl"
)

// Agent names the bench gateway configures: the synthetic agent speaking
// ACP v1 and v2.
func agentName(protocol int) string { return "bench-v" + strconv.Itoa(protocol) }

// agentCommand is the command line of the synthetic agent.
func agentCommand(self []string, runID string, protocol int) []string {
	return append(append([]string{}, self...), "agent", "--run", runID, "--protocol", strconv.Itoa(protocol))
}

// serveGateway is the child mode "gateway": a gateway assembled as
// `acp-gateway serve` assembles it (metrics, access-log interceptors, the
// serve defaults for retention), on 127.0.0.1 with an ephemeral port, whose
// agents are the synthetic agent. It prints "addr HOST:PORT", serves until
// its stdin ends, shuts down (ending every agent), and prints "leftover N",
// the number of its child processes still alive.
//
// With --sandbox bwrap its agents are confined as an authenticated serve
// confines them by default: each in a bubblewrap sandbox (its HOME under
// --sandbox-homes, the bolt file hidden) with, under --sandbox-network
// proxy, a network of its own whose only way out is an egress proxy of the
// gateway's (opened in the sandbox by this executable, whose main calls
// egress.ListenIfCommanded), its process tree under limits.Defaults in a
// cgroup of its own. All must work, as with authentication, or it exits 1
// saying why; before "addr" it then prints "confined LIMITS", how the
// limits are enforced.
//
// With --tokens every call needs one of the file's tokens, as with serve's
// --auth-tokens, refused ones counted by the throttle of
// --auth-failure-limit; the agents still run in any directory.
//
// Besides the SessionService it serves GET /bench/memstats (after a GC)
// and POST /bench/profile/start and /bench/profile/stop, which write
// --cpuprofile, --memprofile and --mutexprofile.
func serveGateway(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runID := fs.String("run", "", "bench run id, passed to the agents")
	storeURL := fs.String("store", "memory:", "memory:, bolt:PATH or redis://HOST:PORT/DB")
	prefix := fs.String("redis-prefix", "", "Redis key prefix")
	cpuprofile := fs.String("cpuprofile", "", "CPU profile file, written between /bench/profile/start and stop")
	memprofile := fs.String("memprofile", "", "heap profile file, written at /bench/profile/stop")
	mutexprofile := fs.String("mutexprofile", "", "mutex contention profile file, of the time between /bench/profile/start and stop")
	sandboxMode := fs.String("sandbox", sandbox.ModeNone, "none, or bwrap: each agent in a bubblewrap sandbox under the default limits, as an authenticated serve runs it")
	homes := fs.String("sandbox-homes", "", "with --sandbox bwrap: the directory of the agents' homes")
	network := fs.String("sandbox-network", "proxy", "with --sandbox bwrap: proxy (a network of the agent's own, out only through the egress proxy) or host")
	tokens := fs.String("tokens", "", "file of TOKEN USER lines: every call needs one of the tokens, as with serve's --auth-tokens (the agents still run in any directory)")
	failureLimit := fs.Int("auth-failure-limit", 0, "with --tokens: failed authentication attempts a client address may make a minute, as serve's flag (0: the default, -1: no limit)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var authn auth.Authenticator
	if *tokens != "" {
		t, err := auth.LoadTokens(*tokens)
		if err != nil {
			fmt.Fprintln(stderr, "bench gateway:", err)
			return 1
		}
		authn = t
	}
	self, err := selfCommand()
	if err != nil {
		fmt.Fprintln(stderr, "bench gateway:", err)
		return 1
	}
	var conf confined
	switch *sandboxMode {
	case sandbox.ModeNone:
	case sandbox.ModeBwrap:
		var hide []string
		if path, ok := strings.CutPrefix(*storeURL, "bolt:"); ok {
			if abs, err := filepath.Abs(path); err == nil {
				hide = append(hide, abs)
			}
		}
		if conf, err = confine(ctx, *homes, hide, *network, self[0]); err != nil {
			fmt.Fprintln(stderr, "bench gateway:", err)
			return 1
		}
		fmt.Fprintf(stdout, "confined %s\n", conf.limits.Describe())
	default:
		fmt.Fprintf(stderr, "bench gateway: --sandbox %q: want bwrap or none\n", *sandboxMode)
		return 2
	}
	opts := storeurl.Options{Store: statestore.Options{
		MaxEvents: statestore.DefaultMaxEvents, MaxEventBytes: statestore.DefaultMaxEventBytes, MaxEndedSessions: statestore.DefaultMaxEndedSessions,
	}, RedisPrefix: *prefix}
	store, err := storeurl.Open(ctx, *storeURL, opts)
	if err != nil {
		fmt.Fprintln(stderr, "bench gateway: store:", err)
		return 1
	}
	prof := &profiler{cpu: *cpuprofile, mem: *memprofile, mutex: *mutexprofile}
	gw, err := app.New(ctx, app.Config{
		Session: session.Options{
			Agents: map[string][]string{
				agentName(1): agentCommand(self, *runID, 1),
				agentName(2): agentCommand(self, *runID, 2),
			},
			Env:          agentEnv(),
			Sandbox:      conf.sandbox,
			Homes:        conf.homes,
			Limits:       conf.limits,
			Egress:       conf.egress,
			EgressHelper: conf.helper,
			Store:        store,
			Log:          slog.New(service.LogHandler(slog.NewJSONHandler(io.Discard, nil))),
			IdleTimeout:  -1,
		},
		Auth:             authn,
		AnyCwd:           authn != nil,
		AuthFailureLimit: *failureLimit,
		ACP:              true, // as serve's --acp default
		Extra: map[string]http.Handler{
			"GET /bench/memstats":      http.HandlerFunc(memstatsHandler),
			"POST /bench/profile/{op}": prof,
		},
	})
	if err != nil {
		store.Close()
		fmt.Fprintln(stderr, "bench gateway:", err)
		return 1
	}
	mgr, srv := gw.Manager, gw.Server
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		mgr.Close()
		store.Close()
		fmt.Fprintln(stderr, "bench gateway:", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	fmt.Fprintf(stdout, "addr %s\n", l.Addr())

	inEnded := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(inEnded)
	}()
	select {
	case <-inEnded:
	case <-ctx.Done():
	case err := <-done:
		fmt.Fprintln(stderr, "bench gateway: serve:", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := prof.stop(); err != nil {
		fmt.Fprintln(stderr, "bench gateway: profile:", err)
	}
	mgr.Close()
	_ = store.Close()
	fmt.Fprintf(stdout, "leftover %d\n", len(procfs.Children(os.Getpid())))
	return 0
}

// confined is what the bench gateway confines its agents with, under
// --sandbox bwrap.
type confined struct {
	sandbox *sandbox.Sandbox
	homes   *workspace.Root
	limits  *limits.Controller
	// egress is the agents' egress proxy's policy (serve's default: no
	// destination allowed besides the internet), helper the executable
	// that opens its socket in a sandbox; nil under --sandbox-network host.
	egress *egress.Policy
	helper string
}

// confine sets up what an authenticated `acp-gateway serve` confines its
// agents with by default (cmd/acp-gateway's setupConfinement): a bubblewrap
// sandbox hiding hide, the agents' homes under homes, with network "proxy"
// the egress proxy (helper being this executable), and limits.Defaults,
// which must be enforceable here. Its errors say what is missing.
func confine(ctx context.Context, homes string, hide []string, network, helper string) (confined, error) {
	var c confined
	if homes == "" {
		return c, errors.New("--sandbox bwrap needs --sandbox-homes")
	}
	switch network {
	case "proxy":
		policy, err := egress.NewPolicy(nil)
		if err != nil {
			return c, err
		}
		c.egress, c.helper = policy, helper
	case "host":
	default:
		return c, fmt.Errorf("--sandbox-network %q: want proxy or host", network)
	}
	sb, err := sandbox.New(ctx, sandbox.Options{Hide: hide})
	if err != nil {
		return c, fmt.Errorf("--sandbox bwrap: %w", err)
	}
	root, err := workspace.New(homes)
	if err != nil {
		return c, fmt.Errorf("--sandbox-homes: %w", err)
	}
	lim, err := limits.Setup(limits.Defaults)
	if err != nil {
		return c, fmt.Errorf("agent limits: %w", err)
	}
	c.sandbox, c.homes, c.limits = sb, root, lim
	return c, nil
}

// agentEnvVars are the variables of the bench's environment its agents
// get. GORACE lets a race-enabled test binary, whose agents are that binary
// too, end its agents without the race detector's exit pause.
var agentEnvVars = []string{"PATH", "HOME", "TMPDIR", "GORACE"}

// agentEnv is the agents' environment. GOMAXPROCS=1: a stand-in agent
// writes a line at a time, and on a 2-CPU host the runtime's threads of a
// thousand agents, spinning for work at each wake-up, took CPU from the
// gateway that the agents did not need.
func agentEnv() []string {
	env := []string{"GOMAXPROCS=1"}
	for _, k := range agentEnvVars {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// memStats is what GET /bench/memstats reports, after a GC.
type memStats struct {
	HeapInuse  uint64 `json:"heapInuse"`
	HeapAlloc  uint64 `json:"heapAlloc"`
	StackInuse uint64 `json:"stackInuse"`
	Sys        uint64 `json:"sys"`
	Goroutines int    `json:"goroutines"`
	// Threads counts the process's OS threads: a goroutine blocked in a
	// system call holds one, with stacks of its own (in StackInuse).
	Threads int   `json:"threads"`
	RSS     int64 `json:"rss"`
	// TotalAlloc and Mallocs count the heap bytes and objects allocated
	// since the process started.
	TotalAlloc uint64 `json:"totalAlloc"`
	Mallocs    uint64 `json:"mallocs"`
}

func memstatsHandler(w http.ResponseWriter, _ *http.Request) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	rss, _ := procStatus(os.Getpid(), "VmRSS")
	threads, _ := os.ReadDir("/proc/self/task")
	_ = json.NewEncoder(w).Encode(memStats{
		HeapInuse: m.HeapInuse, HeapAlloc: m.HeapAlloc, StackInuse: m.StackInuse, Sys: m.Sys,
		Goroutines: runtime.NumGoroutine(), Threads: len(threads), RSS: rss, TotalAlloc: m.TotalAlloc, Mallocs: m.Mallocs,
	})
}

// profiler writes the CPU profile between start and stop, and the heap
// profile at stop.
type profiler struct {
	cpu, mem, mutex string
	mu              sync.Mutex
	f               *os.File
}

// mutexFraction samples one in this many contention events for the mutex
// profile (pprof scales the figures back up).
const mutexFraction = 5

func (p *profiler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var err error
	switch r.PathValue("op") {
	case "start":
		err = p.start()
	case "stop":
		err = p.stop()
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (p *profiler) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mutex != "" {
		runtime.SetMutexProfileFraction(mutexFraction)
	}
	if p.cpu == "" || p.f != nil {
		return nil
	}
	f, err := os.Create(p.cpu)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	p.f = f
	return nil
}

func (p *profiler) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	if p.f != nil {
		pprof.StopCPUProfile()
		errs = append(errs, p.f.Close())
		p.f = nil
	}
	if p.mem != "" {
		f, err := os.Create(p.mem)
		if err == nil {
			runtime.GC()
			err = pprof.Lookup("allocs").WriteTo(f, 0)
			errs = append(errs, f.Close())
		}
		errs = append(errs, err)
		p.mem = "" // once
	}
	if p.mutex != "" {
		f, err := os.Create(p.mutex)
		if err == nil {
			err = pprof.Lookup("mutex").WriteTo(f, 0)
			errs = append(errs, f.Close())
		}
		errs = append(errs, err)
		runtime.SetMutexProfileFraction(0)
		p.mutex = "" // once
	}
	return errors.Join(errs...)
}

// gatewayProc is a running bench gateway child, seen from the bench.
type gatewayProc struct {
	*child
	pid  int
	base string
	// confined is how its agents' limits are enforced (its "confined"
	// line), under --sandbox bwrap; empty otherwise.
	confined string
}

// startGateway starts a bench gateway child with store; extra are more
// flags for it.
func startGateway(ctx context.Context, self []string, runID, store string, extra ...string) (*gatewayProc, error) {
	c, err := startChild(self, "gateway", runID, false, append([]string{"--store", store}, extra...)...)
	if err != nil {
		return nil, err
	}
	g := &gatewayProc{child: c, pid: c.cmd.Process.Pid}
	deadline := time.Now().Add(30 * time.Second)
	line, err := lineWithin(ctx, g.out, time.Until(deadline))
	if c, ok := strings.CutPrefix(strings.TrimSpace(line), "confined "); ok && err == nil {
		g.confined = c
		line, err = lineWithin(ctx, g.out, time.Until(deadline))
	}
	if addr, ok := strings.CutPrefix(strings.TrimSpace(line), "addr "); ok {
		g.base = "http://" + addr
		return g, nil
	}
	g.kill()
	if errors.Is(err, errNoLineInTime) || ctx.Err() != nil {
		return nil, errors.New("bench gateway did not start in time")
	}
	if why := strings.TrimSpace(g.stderr.String()); why != "" {
		return nil, fmt.Errorf("bench gateway did not start: %s", strings.TrimPrefix(why, "bench gateway: "))
	}
	return nil, fmt.Errorf("bench gateway did not start: %v", err)
}

// errNoLineInTime is lineWithin's error when the line is late.
var errNoLineInTime = errors.New("no line in time")

// lineWithin reads a line of a child's output from r, giving up after d
// or when ctx ends. The read it gives up on ends when the caller kills
// the child.
func lineWithin(ctx context.Context, r *bufio.Reader, d time.Duration) (string, error) {
	type lineErr struct {
		line string
		err  error
	}
	got := make(chan lineErr, 1)
	go func() {
		line, err := r.ReadString('\n')
		got <- lineErr{line, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case le := <-got:
		return le.line, le.err
	case <-t.C:
		return "", errNoLineInTime
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop shuts the gateway down and returns how many of its children
// outlived it (by its own count). It first closes tr's idle connections,
// which a graceful HTTP/2 shutdown would otherwise wait a second for.
func (g *gatewayProc) stop(tr *transports) (int, error) {
	tr.close()
	_ = g.stdin.Close()
	res := make(chan int, 1)
	go func() {
		left := -1
		for {
			line, err := g.out.ReadString('\n')
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), "leftover "); ok {
				left, _ = strconv.Atoi(n)
			}
			if err != nil {
				break
			}
		}
		res <- left
	}()
	select {
	case left := <-res:
		err := g.cmd.Wait()
		if left < 0 {
			return 0, fmt.Errorf("bench gateway exited without a report: %v %s", err, strings.TrimSpace(g.stderr.String()))
		}
		return left, err
	case <-time.After(60 * time.Second):
		g.kill()
		return 0, errors.New("bench gateway did not stop within 60s; killed")
	}
}

// stopInto stops g at the end of a phase, putting into the phase's result
// the children it left and, unless the phase failed already, the stop's
// error. Deferred, it must be given a named result's fields: a deferred
// write to a plain local is lost once the return value is copied.
func (g *gatewayProc) stopInto(tr *transports, leftover *int, errText *string) {
	left, err := g.stop(tr)
	*leftover = left
	if err != nil && *errText == "" {
		*errText = err.Error()
	}
}

func (g *gatewayProc) memstats(ctx context.Context) (memStats, error) {
	var m memStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/bench/memstats", nil)
	if err != nil {
		return m, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, err
	}
	defer res.Body.Close()
	err = json.NewDecoder(res.Body).Decode(&m)
	return m, err
}

// profileWhile starts the gateway's profiles when on and returns what
// stops them (writing them); it reports errors through say.
func (g *gatewayProc) profileWhile(ctx context.Context, on bool, say func(string, ...any)) (stop func()) {
	if !on {
		return func() {}
	}
	if err := g.profile(ctx, "start"); err != nil {
		say("profile: %v", err)
	}
	return func() {
		if err := g.profile(ctx, "stop"); err != nil {
			say("profile: %v", err)
		}
	}
}

// profile starts ("start") or stops and writes ("stop") the gateway's
// profiles.
func (g *gatewayProc) profile(ctx context.Context, op string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base+"/bench/profile/"+op, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("profile %s: %s", op, strings.TrimSpace(string(b)))
	}
	return nil
}

// lockedBuffer collects a child's stderr, keeping the last 64 KiB.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if len(l.b) > 64<<10 {
		l.b = append([]byte(nil), l.b[len(l.b)-32<<10:]...)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
