package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/gzipbomb"
)

// The bombs phase measures what unauthenticated gzip bombs cost another
// user (issue 19): a user's calls are timed on a gateway with token
// authentication, in windows without bombs and windows while Bombs
// clients send, without end, requests that carry a wrong token and a
// 1 MiB gzip body inflating to 1 GiB. The gateway must answer them
// before reading their bodies.
const (
	// bombMiB is what one bomb inflates to, in MiB; compressed it is
	// about 1 MiB.
	bombMiB = 1024
	// bombTarget is the bound on the user's p50 with the bombs over its
	// p50 without them.
	bombTarget = 2.0
	// bombTurnUpdates is the size of the user's Prompt turns.
	bombTurnUpdates = 5
	// bombersFrom is the bombers' source address. The user's calls come
	// from 127.0.0.1: the throttle counts failures per client address,
	// and with both on one address the bombs would lock the user out (see
	// auth.Throttle), which is not what this measures.
	bombersFrom = "127.0.0.2"
)

// Values of Config.BombThrottle: the gateway's --auth-failure-limit at its
// default, off, or one run of each.
const (
	BombThrottleDefault = "default"
	BombThrottleOff     = "off"
	BombThrottleBoth    = "both"
)

// BombThrottles are the values of Config.BombThrottle.
var BombThrottles = []string{BombThrottleBoth, BombThrottleOff, BombThrottleDefault}

// bombThrottles are the throttle settings the bombs phase runs with, in
// order: off first, the harder case, where every bomb reaches the token
// check.
func (c *Config) bombThrottles() []string {
	if c.BombThrottle == BombThrottleBoth {
		return []string{BombThrottleOff, BombThrottleDefault}
	}
	return []string{c.BombThrottle}
}

// BombsResult is one run of the bombs phase, on a gateway of its own.
type BombsResult struct {
	// Throttle is BombThrottleOff or BombThrottleDefault;
	// AuthFailureLimit the gateway's --auth-failure-limit for it.
	Throttle         string `json:"throttle"`
	AuthFailureLimit int    `json:"authFailureLimit"`
	// Bombers is how many bombs are in flight at once during a bombed
	// window; BombBytes one's compressed size, InflatedBytes its size
	// inflated. BombersNice is the bombers' CPU priority.
	Bombers       int   `json:"bombers"`
	BombBytes     int   `json:"bombBytes"`
	InflatedBytes int64 `json:"inflatedBytes"`
	BombersNice   int   `json:"bombersNice"`
	// Samples is the user's calls of each kind per window; TurnUpdates
	// the size of its Prompt turns.
	Samples     int `json:"samples"`
	TurnUpdates int `json:"turnUpdates"`
	// IdleRSS is the gateway's RSS after the warm-up, before any bomb.
	IdleRSS int64 `json:"idleRssBytes"`
	// Rounds are the windows in the order they ran: each round a quiet
	// window, then a bombed one.
	Rounds []BombRound `json:"rounds"`
	// Quiet, Control and Bombed sum up each condition's windows: medians
	// over the rounds of each latency figure, the highest peak RSS. In a
	// control window the same bombers bomb a server of their own (auth's
	// refusal of unauthenticated requests, over the same tokens and
	// throttle, in front of nothing), at their priority: what the attack
	// costs the user through this host's CPUs, without the gateway.
	Quiet   BombSummary `json:"quiet"`
	Control BombSummary `json:"control"`
	Bombed  BombSummary `json:"bombed"`
	// GetP50Ratio and TurnP50Ratio are the medians over the rounds of the
	// bombed window's p50 over the quiet window's of the same round
	// (RoundGetP50Ratios, RoundTurnP50Ratios).
	GetP50Ratio        float64   `json:"getSessionP50Ratio"`
	TurnP50Ratio       float64   `json:"turnP50Ratio"`
	RoundGetP50Ratios  []float64 `json:"roundGetSessionP50Ratios,omitempty"`
	RoundTurnP50Ratios []float64 `json:"roundTurnP50Ratios,omitempty"`
	// ControlGetP50Ratio and ControlTurnP50Ratio are the same of the
	// control windows over the quiet ones.
	ControlGetP50Ratio  float64 `json:"controlGetSessionP50Ratio"`
	ControlTurnP50Ratio float64 `json:"controlTurnP50Ratio"`
	// Leftover counts the gateway's child processes alive after it shut
	// down (its own count).
	Leftover int    `json:"leftoverChildren"`
	Error    string `json:"error,omitempty"`
}

// BombRound is one quiet window, the control window after it and the
// bombed window after that.
type BombRound struct {
	Quiet   BombWindow `json:"quiet"`
	Control BombWindow `json:"control"`
	Bombed  BombWindow `json:"bombed"`
}

// BombWindow is the user's calls during one window.
type BombWindow struct {
	// GetSession is the latency of a GetSession call; Turn of a Prompt
	// turn, from the call to the turn's end.
	GetSession Latency `json:"getSessionMs"`
	Turn       Latency `json:"turnMs"`
	// PeakRSS is the gateway's peak resident set during the window, and
	// AddedRSS that less its resident set as the window started;
	// GatewayCPU the gateway's CPU time over the window's, in percent of
	// one CPU.
	PeakRSS    int64   `json:"peakRssBytes"`
	AddedRSS   int64   `json:"addedRssBytes"`
	GatewayCPU float64 `json:"gatewayCpuPercent"`
	Seconds    float64 `json:"seconds"`
	// Bombs is what the bombers saw, in a bombed window.
	Bombs *bombersResult `json:"bombs,omitempty"`
}

// BombSummary is one condition over the rounds.
type BombSummary struct {
	GetSessionP50 float64 `json:"getSessionP50Ms"`
	GetSessionP99 float64 `json:"getSessionP99Ms"`
	TurnP50       float64 `json:"turnP50Ms"`
	TurnP99       float64 `json:"turnP99Ms"`
	PeakRSS       int64   `json:"peakRssBytes"`
	// AddedRSS is the most a window added to the RSS it started with.
	AddedRSS int64 `json:"addedRssBytes"`
	// GatewayCPU is the median of the windows' GatewayCPU.
	GatewayCPU float64 `json:"gatewayCpuPercent"`
	// BombsPerSecond is the median over the bombed windows of the bombs
	// answered (or failed) a second; 0 when quiet. Refused counts the
	// refusals of every window, by code.
	BombsPerSecond float64        `json:"bombsPerSecond,omitempty"`
	Refused        map[string]int `json:"refused,omitempty"`
}

// Met reports whether both of the user's p50s stayed within bombTarget.
func (r *BombsResult) Met() bool {
	return r.Error == "" && r.GetP50Ratio > 0 && r.GetP50Ratio <= bombTarget && r.TurnP50Ratio > 0 && r.TurnP50Ratio <= bombTarget
}

// runBombs runs the bombs phase with throttle (BombThrottleOff or
// BombThrottleDefault) on a gateway of its own whose token file, with two
// users, is written in dir.
func runBombs(ctx context.Context, self []string, runID string, tr *transports, cfg *Config, cwd, dir, throttle string, say func(string, ...any)) (res BombsResult) {
	res = BombsResult{Throttle: throttle, AuthFailureLimit: auth.DefaultFailureLimit, Bombers: cfg.Bombs, InflatedBytes: bombMiB << 20,
		BombersNice: cfg.BombersNice, Samples: cfg.BombSamples, TurnUpdates: bombTurnUpdates}
	if throttle == BombThrottleOff {
		res.AuthFailureLimit = -1
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	user, other, wrong := randomToken(), randomToken(), randomToken()
	tokens := filepath.Join(dir, "bombs-tokens-"+throttle)
	if err := os.WriteFile(tokens, []byte(user+" bench-user\n"+other+" bench-other\n"), 0o600); err != nil {
		res.Error = err.Error()
		return res
	}
	// Serve's default store: the memory store would keep every turn's
	// events in the gateway's heap, which would grow round by round.
	store := "bolt:" + filepath.Join(dir, "bombs-"+throttle+".db")
	g, err := startGateway(ctx, self, runID, store, "--tokens", tokens, "--auth-failure-limit", strconv.Itoa(res.AuthFailureLimit))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer g.stopInto(tr, &res.Leftover, &res.Error)
	u := &userCalls{c: bridge.NewClient(tr.h1, g.base, user, connect.WithCodec(skimCodec{})), cwd: cwd,
		w: Workload{Updates: bombTurnUpdates, Payload: cfg.Payload}}
	// The session GetSession reads has one turn, and keeps it.
	if u.getID, err = u.session(ctx); err == nil {
		_, err = promptTurn(ctx, u.c, u.getID, u.w, nil)
	}
	// A few calls first, for what is made once (connections, pools).
	if err == nil {
		_, err = u.window(ctx, min(cfg.BombSamples, 10))
	}
	if err != nil {
		res.Error = "warm-up: " + err.Error()
		return res
	}
	res.IdleRSS, _ = procStatus(g.pid, "VmRSS")
	bombers := bombersArgs{base: g.base, n: cfg.Bombs, token: wrong, from: bombersFrom, nice: cfg.BombersNice}
	for round := range cfg.BombRounds {
		var r BombRound
		if r.Quiet, err = quietWindow(ctx, g, u, cfg.BombSamples); err != nil {
			res.Error = fmt.Sprintf("round %d, quiet: %v", round+1, err)
			break
		}
		control := bombers
		control.tokens, control.limit = tokens, res.AuthFailureLimit
		if r.Control, err = bombedWindow(ctx, self, runID, g, u, cfg.BombSamples, control); err != nil {
			res.Error = fmt.Sprintf("round %d, control: %v", round+1, err)
			break
		}
		if r.Bombed, err = bombedWindow(ctx, self, runID, g, u, cfg.BombSamples, bombers); err != nil {
			res.Error = fmt.Sprintf("round %d, bombed: %v", round+1, err)
			break
		}
		res.BombBytes = r.Bombed.Bombs.BombBytes
		res.Rounds = append(res.Rounds, r)
		say("bombs (throttle %s): round %d of %d: p50 GetSession %.3f / %.3f / %.3f ms, Prompt turn %.3f / %.3f / %.3f ms quiet / control / bombed (%.0f bombs/s), peak RSS %s, %s",
			throttle, round+1, cfg.BombRounds, r.Quiet.GetSession.P50, r.Control.GetSession.P50, r.Bombed.GetSession.P50,
			r.Quiet.Turn.P50, r.Control.Turn.P50, r.Bombed.Turn.P50, r.Bombed.Bombs.PerSecond,
			fmtBytes(float64(r.Quiet.PeakRSS)), fmtBytes(float64(r.Bombed.PeakRSS)))
	}
	res.summarize()
	return res
}

// summarize fills the summaries and ratios from the rounds.
func (r *BombsResult) summarize() {
	var quiet, control, bombed []BombWindow
	for _, rd := range r.Rounds {
		quiet, control, bombed = append(quiet, rd.Quiet), append(control, rd.Control), append(bombed, rd.Bombed)
	}
	r.Quiet, r.Control, r.Bombed = summarizeWindows(quiet), summarizeWindows(control), summarizeWindows(bombed)
	r.RoundGetP50Ratios, r.RoundTurnP50Ratios = p50Ratios(bombed, quiet, func(w BombWindow) float64 { return w.GetSession.P50 }),
		p50Ratios(bombed, quiet, func(w BombWindow) float64 { return w.Turn.P50 })
	r.GetP50Ratio, r.TurnP50Ratio = median0(r.RoundGetP50Ratios), median0(r.RoundTurnP50Ratios)
	r.ControlGetP50Ratio = median0(p50Ratios(control, quiet, func(w BombWindow) float64 { return w.GetSession.P50 }))
	r.ControlTurnP50Ratio = median0(p50Ratios(control, quiet, func(w BombWindow) float64 { return w.Turn.P50 }))
}

// summarizeWindows sums up the windows of one condition.
func summarizeWindows(ws []BombWindow) BombSummary {
	var s BombSummary
	if len(ws) == 0 {
		return s
	}
	figure := func(f func(BombWindow) float64) float64 {
		vs := make([]float64, len(ws))
		for i, w := range ws {
			vs[i] = f(w)
		}
		return median(vs)
	}
	s.GetSessionP50, s.GetSessionP99 = figure(func(w BombWindow) float64 { return w.GetSession.P50 }), figure(func(w BombWindow) float64 { return w.GetSession.P99 })
	s.TurnP50, s.TurnP99 = figure(func(w BombWindow) float64 { return w.Turn.P50 }), figure(func(w BombWindow) float64 { return w.Turn.P99 })
	s.GatewayCPU = figure(func(w BombWindow) float64 { return w.GatewayCPU })
	var rates []float64
	for _, w := range ws {
		s.PeakRSS, s.AddedRSS = max(s.PeakRSS, w.PeakRSS), max(s.AddedRSS, w.AddedRSS)
		if b := w.Bombs; b != nil {
			rates = append(rates, b.PerSecond)
			if s.Refused == nil {
				s.Refused = map[string]int{}
			}
			for code, n := range b.Refused {
				s.Refused[code] += n
			}
		}
	}
	s.BombsPerSecond = median0(rates)
	return s
}

// p50Ratios are f of each window of num over f of the window of den of the
// same round, where that is not 0.
func p50Ratios(num, den []BombWindow, f func(BombWindow) float64) []float64 {
	var out []float64
	for i := range min(len(num), len(den)) {
		if d := f(den[i]); d > 0 {
			out = append(out, round3(f(num[i])/d))
		}
	}
	return out
}

// median0 is the median of vs, or 0 for none.
func median0(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	return median(vs)
}

// randomToken returns a token of 32 hex digits.
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// userCalls are the calls of the user the bombs phase times, through c:
// GetSession of session getID, which does not change, and Prompt turns of
// w, on a session of each window's own (in cwd), so that every window
// starts from the same state.
type userCalls struct {
	c     acpv2connect.SessionServiceClient
	getID string
	cwd   string
	w     Workload
}

// session creates a session of the user.
func (u *userCalls) session(ctx context.Context) (string, error) {
	created, err := u.c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agentName(2), Cwd: u.cwd}))
	if err != nil {
		return "", fmt.Errorf("CreateSession: %w", err)
	}
	return created.Msg.GetSessionId(), nil
}

// window times n GetSession calls, each followed by a Prompt turn on a
// session created for the window (before the clock starts) and closed
// after it.
func (u *userCalls) window(ctx context.Context, n int) (BombWindow, error) {
	var win BombWindow
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	id, err := u.session(ctx)
	if err != nil {
		return win, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = u.c.CloseSession(cctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id}))
	}()
	start := time.Now()
	gets, turns := make([]int64, 0, n), make([]int64, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := u.c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: u.getID})); err != nil {
			return win, fmt.Errorf("GetSession: %w", err)
		}
		t1 := time.Now()
		if _, err := promptTurn(ctx, u.c, id, u.w, nil); err != nil {
			return win, err
		}
		gets, turns = append(gets, int64(t1.Sub(t0))), append(turns, int64(time.Since(t1)))
	}
	win.Seconds = round3(time.Since(start).Seconds())
	win.GetSession, win.Turn = latencyOf(gets), latencyOf(turns)
	return win, nil
}

// quietWindow is a window of u's with the gateway's peak RSS and CPU
// over it.
func quietWindow(ctx context.Context, g *gatewayProc, u *userCalls, n int) (BombWindow, error) {
	rss0 := startPeakRSS(g)
	cpu0, _ := procCPU(g.pid)
	win, err := u.window(ctx, n)
	win.gatewayUse(g, rss0, cpu0)
	return win, err
}

// startPeakRSS resets the gateway's peak RSS and returns its RSS.
func startPeakRSS(g *gatewayProc) int64 {
	resetPeakRSS(g.pid)
	rss, _ := procStatus(g.pid, "VmRSS")
	return rss
}

// gatewayUse records the gateway's peak RSS, and what it added to rss0,
// and its CPU since cpu0 over the window's time.
func (win *BombWindow) gatewayUse(g *gatewayProc, rss0 int64, cpu0 time.Duration) {
	win.PeakRSS, _ = procStatus(g.pid, "VmHWM")
	win.AddedRSS = max(win.PeakRSS-rss0, 0)
	if cpu1, err := procCPU(g.pid); err == nil && win.Seconds > 0 {
		win.GatewayCPU = round3(100 * (cpu1 - cpu0).Seconds() / win.Seconds)
	}
}

// bombedWindow is quietWindow while a bombers child sends bombs at the
// gateway: the window starts once each bomber has had an answer, and the
// bombers stop after it. The peak RSS is from before the bombers start to
// after they stop.
func bombedWindow(ctx context.Context, self []string, runID string, g *gatewayProc, u *userCalls, n int, b bombersArgs) (BombWindow, error) {
	rss0 := startPeakRSS(g)
	p, err := startBombers(ctx, self, runID, b)
	if err != nil {
		return BombWindow{}, err
	}
	cpu0, _ := procCPU(g.pid)
	win, err := u.window(ctx, n)
	got, stopErr := p.stop(ctx)
	win.gatewayUse(g, rss0, cpu0)
	if err == nil {
		err = stopErr
	}
	if err != nil {
		return win, err
	}
	win.Bombs = &got
	if got.Refused["unauthenticated"]+got.Refused["resource_exhausted"] == 0 {
		return win, fmt.Errorf("no bomb was refused as unauthenticated or throttled (%d sent, %d failed: %s)", got.Sent, got.Failed, got.FirstFailure)
	}
	return win, nil
}

// bombersArgs are the flags of a bombers child: n bombers at the gateway at
// base, sending token, from the source address from, at CPU priority nice.
// With tokens, the child bombs a server of its own instead, which refuses
// what those tokens do not authenticate, under a throttle of limit (a
// control window).
type bombersArgs struct {
	base, token, from, tokens string
	n, nice, limit            int
}

// bombersResult is what a bombers child reports once stopped.
type bombersResult struct {
	// Sent counts the bombs answered or failed; Refused the answers by
	// their code ("ok" for an answer without an error: a bomb let in),
	// Failed the requests that got no answer (FirstFailure says why).
	Sent         int            `json:"sent"`
	Refused      map[string]int `json:"refused"`
	Failed       int            `json:"failed"`
	FirstFailure string         `json:"firstFailure,omitempty"`
	// BombBytes is one bomb's compressed size.
	BombBytes int `json:"bombBytes"`
	// PerSecond is Sent over the time the bombers ran; CPUSeconds their
	// own CPU time, Nice their CPU priority.
	PerSecond  float64 `json:"perSecond"`
	CPUSeconds float64 `json:"cpuSeconds"`
	Nice       int     `json:"nice"`
}

// serveBombers is the child mode "bombers": it lowers its CPU priority to
// --nice, then --n bombers send, one after the other each, requests of
// gzipbomb.Kinds (bomber i the kind i mod 3) to the gateway at --base,
// from the source address --from, with --token as their bearer token and
// a gzip body of --mib MiB of zeros. It prints "ready" once every bomber
// has had an answer (or failed), goes on until its stdin ends, and prints
// its bombersResult as JSON.
func serveBombers(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench bombers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.String("run", "", "bench run id (marks the process)")
	base := fs.String("base", "", "the gateway's base URL")
	n := fs.Int("n", 1, "bombs in flight at once")
	token := fs.String("token", "", "the bearer token the bombs carry (empty: none)")
	from := fs.String("from", "", "source address of the bombs' connections (empty: any)")
	nice := fs.Int("nice", 0, "CPU priority (nice value) to run at")
	mib := fs.Int("mib", bombMiB, "MiB a bomb inflates to (a multiple of 16)")
	tokens := fs.String("serve-tokens", "", "bomb a server of this child's own instead of --base, which refuses, as the gateway does before reading a body, what this file of TOKEN USER lines does not authenticate")
	limit := fs.Int("auth-failure-limit", 0, "with --serve-tokens: its throttle, as the gateway's flag")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *tokens != "" {
		b, stop, err := serveRefusals(*tokens, *limit)
		if err != nil {
			fmt.Fprintln(stderr, "bench bombers:", err)
			return 1
		}
		defer stop()
		*base = b
	}
	if *base == "" || *n < 1 || *n > 1000 || *mib < 16 {
		fmt.Fprintln(stderr, "bench bombers: --base, --n (1 to 1000) and --mib (at least 16) are required")
		return 2
	}
	got := *nice
	if *nice > 0 {
		var err error
		if got, err = lowerPriority(*nice); err != nil {
			fmt.Fprintln(stderr, "bench bombers:", err)
			return 1
		}
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	if *from != "" {
		ip := net.ParseIP(*from)
		if ip == nil {
			fmt.Fprintf(stderr, "bench bombers: --from %q is not an IP address\n", *from)
			return 2
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	res := bomb(ctx, *base, *n, *token, *mib, dialer, stdin, func() { fmt.Fprintln(stdout, "ready") })
	res.Nice = got
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

// serveRefusals serves, on 127.0.0.1, auth.Middleware over the tokens of
// file, with a throttle of limit as the gateway's, in front of nothing:
// what the gateway runs before it reads a body. It returns the server's
// base URL and what stops it.
func serveRefusals(file string, limit int) (string, func(), error) {
	tokens, err := auth.LoadTokens(file)
	if err != nil {
		return "", nil, err
	}
	var opts []auth.InterceptorOption
	if limit >= 0 {
		opts = append(opts, auth.WithThrottle(auth.NewThrottle(cmp.Or(limit, auth.DefaultFailureLimit), slog.New(slog.DiscardHandler))))
	}
	nothing := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "not served", http.StatusNotImplemented) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: auth.Middleware(tokens, nothing, nil, opts...), Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

// bomb runs n bombers at the gateway at base until stop ends (or ctx
// does), calling ready once each has had an answer or failed.
func bomb(ctx context.Context, base string, n int, token string, mib int, dialer *net.Dialer, stop io.Reader, ready func()) bombersResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stop)
		cancel()
	}()
	body := gzipbomb.Zeros(mib)
	enveloped := gzipbomb.Envelope(1, body)
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	h1 := &http.Transport{DialContext: dialer.DialContext, MaxConnsPerHost: n, DisableCompression: true}
	h2 := &http.Transport{DialContext: dialer.DialContext, Protocols: h2c}
	defer h1.CloseIdleConnections()
	defer h2.CloseIdleConnections()
	cpu0, start := selfCPU(), time.Now()
	each := make([]bombersResult, n)
	var first, all sync.WaitGroup
	first.Add(n)
	for i := range n {
		all.Go(func() {
			r := &each[i]
			r.Refused = map[string]int{}
			k := gzipbomb.Kinds[i%len(gzipbomb.Kinds)]
			hc := &http.Client{Transport: h1}
			if k.H2C {
				hc.Transport = h2
			}
			for j := 0; ctx.Err() == nil; j++ {
				code, err := bombOnce(ctx, hc, k, base, body, enveloped, token)
				switch {
				case ctx.Err() != nil && err != nil:
					// Cut off by the stop: not counted.
				case err != nil:
					r.Sent++
					r.Failed++
					if r.FirstFailure == "" {
						r.FirstFailure = k.Name + ": " + err.Error()
					}
				default:
					r.Sent++
					r.Refused[cmp.Or(code, "ok")]++
				}
				if j == 0 {
					first.Done()
				}
				if err != nil && ctx.Err() == nil {
					// A refused connection is not retried at once.
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	waited := make(chan struct{})
	go func() { first.Wait(); close(waited) }()
	select {
	case <-waited:
		ready()
	case <-ctx.Done():
	}
	all.Wait()
	res := bombersResult{Refused: map[string]int{}, BombBytes: len(body)}
	for _, r := range each {
		res.Sent += r.Sent
		res.Failed += r.Failed
		for code, k := range r.Refused {
			res.Refused[code] += k
		}
		if res.FirstFailure == "" {
			res.FirstFailure = r.FirstFailure
		}
	}
	if d := time.Since(start).Seconds(); d > 0 {
		res.PerSecond = round3(float64(res.Sent) / d)
	}
	res.CPUSeconds = round3((selfCPU() - cpu0).Seconds())
	return res
}

// bombOnce sends one bomb of kind k and returns the code of its answer
// (see gzipbomb.Refusal).
func bombOnce(ctx context.Context, hc *http.Client, k gzipbomb.Kind, base string, body, enveloped []byte, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := k.NewRequest(ctx, base, body, enveloped, token)
	if err != nil {
		return "", err
	}
	res, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	// Read to the end (within 64 KiB), for gRPC's trailers.
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return "", err
	}
	return gzipbomb.Refusal(res, b), nil
}

// bombersProc is a running bombers child.
type bombersProc struct{ *child }

// startBombers starts a bombers child and returns once each of its
// bombers has had an answer.
func startBombers(ctx context.Context, self []string, runID string, b bombersArgs) (*bombersProc, error) {
	c, err := startChild(self, "bombers", runID, true, "--base", b.base, "--n", strconv.Itoa(b.n),
		"--token", b.token, "--from", b.from, "--nice", strconv.Itoa(b.nice), "--serve-tokens", b.tokens, "--auth-failure-limit", strconv.Itoa(b.limit))
	if err != nil {
		return nil, err
	}
	p := &bombersProc{c}
	line, err := lineWithin(ctx, p.out, 2*time.Minute)
	if strings.TrimSpace(line) == "ready" {
		return p, nil
	}
	p.kill()
	return nil, fmt.Errorf("bombers did not start: %q %v %s", line, err, strings.TrimSpace(p.stderr.String()))
}

// stop ends the bombing and returns what the bombers saw; it kills the
// child when ctx ends first, or the result takes a minute.
func (p *bombersProc) stop(ctx context.Context) (bombersResult, error) {
	_ = p.stdin.Close()
	var res bombersResult
	err := p.result(ctx, time.Minute, "bombers", &res)
	return res, err
}

// throttleLabel names a run's throttle with the gateway's flag.
func (r *BombsResult) throttleLabel() string {
	return fmt.Sprintf("%s (--auth-failure-limit %d)", r.Throttle, r.AuthFailureLimit)
}

// verdict is the run's result against bombTarget, in a line.
func (r *BombsResult) verdict() string {
	met := "met"
	if !r.Met() {
		met = "NOT met"
	}
	return fmt.Sprintf("with %d bombs at once, another user's p50 is %.2fx (GetSession) and %.2fx (Prompt turn) its p50 without (target <= %.0fx: %s); peak RSS %s without (a window added at most %s), %s with (%s)",
		r.Bombers, r.GetP50Ratio, r.TurnP50Ratio, bombTarget, met, fmtBytes(float64(r.Quiet.PeakRSS)), fmtBytes(float64(r.Quiet.AddedRSS)),
		fmtBytes(float64(r.Bombed.PeakRSS)), fmtBytes(float64(r.Bombed.AddedRSS)))
}

// write writes the bombs phase's results: each condition's medians side
// by side, the rounds' ratios and the verdict.
func (r *BombsResult) write(w io.Writer) {
	fmt.Fprintf(w, "\nbombs, throttle %s: %d unauthenticated requests at once (a wrong token; %s), each a %s gzip body inflating to %s, from %s at nice %d;\n",
		r.throttleLabel(), r.Bombers, kindNames(), fmtBytes(float64(r.BombBytes)), fmtBytes(float64(r.InflatedBytes)), bombersFrom, r.BombersNice)
	fmt.Fprintf(w, "another user's GetSession calls (of a one-turn session) and %d-update Prompt turns (on a session of each window's own), connect+proto over HTTP/1.1 from 127.0.0.1, %d of each per window; bolt store; %d rounds of a window without bombs, one with them at a server of the bombers' own (control), one with them at the gateway; medians of rounds\n",
		r.TurnUpdates, r.Samples, len(r.Rounds))
	if r.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", firstLine(r.Error))
		if len(r.Rounds) == 0 {
			return
		}
	}
	fmt.Fprintf(w, "  gateway RSS before the first round: %s\n\n", fmtBytes(float64(r.IdleRSS)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "window\tGetSession p50 ms\tp99 ms\tturn p50 ms\tp99 ms\tpeak RSS\tadded in a window\tgateway CPU %\tbombs/s\tanswers to the bombs\t")
	for _, row := range []struct {
		name string
		s    BombSummary
	}{{"without bombs", r.Quiet}, {"bombs at a server of their own (control)", r.Control}, {"bombs at the gateway", r.Bombed}} {
		rate, answers := "-", "-"
		if row.s.Refused != nil {
			rate = fmt.Sprintf("%.0f", row.s.BombsPerSecond)
			answers = refusedText(row.s.Refused)
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%.1f\t%s\t%s\t\n", row.name, row.s.GetSessionP50, row.s.GetSessionP99,
			row.s.TurnP50, row.s.TurnP99, fmtBytes(float64(row.s.PeakRSS)), fmtBytes(float64(row.s.AddedRSS)), row.s.GatewayCPU, rate, answers)
	}
	tw.Flush()
	fmt.Fprintf(w, "  at the gateway / without, p50: GetSession %.2fx (rounds %s), Prompt turn %.2fx (rounds %s)\n",
		r.GetP50Ratio, joinRatios(r.RoundGetP50Ratios), r.TurnP50Ratio, joinRatios(r.RoundTurnP50Ratios))
	fmt.Fprintf(w, "  control / without, p50: GetSession %.2fx, Prompt turn %.2fx (the same bombs at another process of this host)\n",
		r.ControlGetP50Ratio, r.ControlTurnP50Ratio)
	fmt.Fprintf(w, "  %s\n", r.verdict())
}

// kindNames lists gzipbomb.Kinds' names.
func kindNames() string {
	var names []string
	for _, k := range gzipbomb.Kinds {
		names = append(names, k.Name)
	}
	return strings.Join(names, ", ")
}

// refusedText lists the answers to the bombs by code, most first.
func refusedText(refused map[string]int) string {
	codes := slices.Collect(maps.Keys(refused))
	slices.SortFunc(codes, func(a, b string) int { return cmp.Or(cmp.Compare(refused[b], refused[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s %d", c, refused[c])
	}
	return strings.Join(parts, ", ")
}

func joinRatios(rs []float64) string {
	parts := make([]string, len(rs))
	for i, v := range rs {
		parts[i] = fmt.Sprintf("%.2fx", v)
	}
	return strings.Join(parts, ", ")
}
