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
	// Quiet and Bombed sum up each condition's windows: medians over the
	// rounds of each latency figure, the highest peak RSS.
	Quiet  BombSummary `json:"quiet"`
	Bombed BombSummary `json:"bombed"`
	// GetP50Ratio and TurnP50Ratio are the medians over the rounds of the
	// bombed window's p50 over the quiet window's of the same round
	// (RoundGetP50Ratios, RoundTurnP50Ratios).
	GetP50Ratio        float64   `json:"getSessionP50Ratio"`
	TurnP50Ratio       float64   `json:"turnP50Ratio"`
	RoundGetP50Ratios  []float64 `json:"roundGetSessionP50Ratios,omitempty"`
	RoundTurnP50Ratios []float64 `json:"roundTurnP50Ratios,omitempty"`
	// Leftover counts the gateway's child processes alive after it shut
	// down (its own count).
	Leftover int    `json:"leftoverChildren"`
	Error    string `json:"error,omitempty"`
}

// BombRound is one quiet window and the bombed window after it.
type BombRound struct {
	Quiet  BombWindow `json:"quiet"`
	Bombed BombWindow `json:"bombed"`
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
func runBombs(ctx context.Context, self []string, runID string, tr *transports, cfg *Config, cwd, dir, throttle string, say func(string, ...any)) BombsResult {
	res := BombsResult{Throttle: throttle, AuthFailureLimit: auth.DefaultFailureLimit, Bombers: cfg.Bombs, InflatedBytes: bombMiB << 20,
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
	defer func() {
		left, err := g.stop(tr)
		res.Leftover = left
		if err != nil && res.Error == "" {
			res.Error = err.Error()
		}
	}()
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
		if r.Bombed, err = bombedWindow(ctx, self, runID, g, u, cfg.BombSamples, bombers); err != nil {
			res.Error = fmt.Sprintf("round %d, bombed: %v", round+1, err)
			break
		}
		res.BombBytes = r.Bombed.Bombs.BombBytes
		res.Rounds = append(res.Rounds, r)
		say("bombs (throttle %s): round %d of %d: GetSession p50 %.3f ms quiet, %.3f ms bombed (%.0f bombs/s), peak RSS %s, %s",
			throttle, round+1, cfg.BombRounds, r.Quiet.GetSession.P50, r.Bombed.GetSession.P50, r.Bombed.Bombs.PerSecond,
			fmtBytes(float64(r.Quiet.PeakRSS)), fmtBytes(float64(r.Bombed.PeakRSS)))
	}
	res.summarize()
	return res
}

// summarize fills the summaries and ratios from the rounds.
func (r *BombsResult) summarize() {
	var qg50, qg99, qt50, qt99, bg50, bg99, bt50, bt99, rates, qcpu, bcpu []float64
	r.Quiet, r.Bombed = BombSummary{}, BombSummary{}
	r.RoundGetP50Ratios, r.RoundTurnP50Ratios = nil, nil
	for _, rd := range r.Rounds {
		q, b := rd.Quiet, rd.Bombed
		qg50, qg99, qt50, qt99 = append(qg50, q.GetSession.P50), append(qg99, q.GetSession.P99), append(qt50, q.Turn.P50), append(qt99, q.Turn.P99)
		bg50, bg99, bt50, bt99 = append(bg50, b.GetSession.P50), append(bg99, b.GetSession.P99), append(bt50, b.Turn.P50), append(bt99, b.Turn.P99)
		r.Quiet.PeakRSS, r.Bombed.PeakRSS = max(r.Quiet.PeakRSS, q.PeakRSS), max(r.Bombed.PeakRSS, b.PeakRSS)
		r.Quiet.AddedRSS, r.Bombed.AddedRSS = max(r.Quiet.AddedRSS, q.AddedRSS), max(r.Bombed.AddedRSS, b.AddedRSS)
		qcpu, bcpu = append(qcpu, q.GatewayCPU), append(bcpu, b.GatewayCPU)
		if q.GetSession.P50 > 0 {
			r.RoundGetP50Ratios = append(r.RoundGetP50Ratios, round3(b.GetSession.P50/q.GetSession.P50))
		}
		if q.Turn.P50 > 0 {
			r.RoundTurnP50Ratios = append(r.RoundTurnP50Ratios, round3(b.Turn.P50/q.Turn.P50))
		}
		if s := b.Bombs; s != nil {
			rates = append(rates, s.PerSecond)
			if r.Bombed.Refused == nil {
				r.Bombed.Refused = map[string]int{}
			}
			for code, n := range s.Refused {
				r.Bombed.Refused[code] += n
			}
		}
	}
	if len(r.Rounds) == 0 {
		return
	}
	r.Quiet.GetSessionP50, r.Quiet.GetSessionP99, r.Quiet.TurnP50, r.Quiet.TurnP99 = median(qg50), median(qg99), median(qt50), median(qt99)
	r.Bombed.GetSessionP50, r.Bombed.GetSessionP99, r.Bombed.TurnP50, r.Bombed.TurnP99 = median(bg50), median(bg99), median(bt50), median(bt99)
	r.Quiet.GatewayCPU, r.Bombed.GatewayCPU = median(qcpu), median(bcpu)
	if len(rates) > 0 {
		r.Bombed.BombsPerSecond = median(rates)
	}
	if len(r.RoundGetP50Ratios) > 0 {
		r.GetP50Ratio = median(r.RoundGetP50Ratios)
	}
	if len(r.RoundTurnP50Ratios) > 0 {
		r.TurnP50Ratio = median(r.RoundTurnP50Ratios)
	}
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
type bombersArgs struct {
	base, token, from string
	n, nice           int
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
	if err := fs.Parse(args); err != nil {
		return 2
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
		"--token", b.token, "--from", b.from, "--nice", strconv.Itoa(b.nice))
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
	fmt.Fprintf(w, "another user's GetSession calls (of a one-turn session) and %d-update Prompt turns (on a session of each window's own), connect+proto over HTTP/1.1 from 127.0.0.1, %d of each per window; bolt store; %d rounds of a window without bombs, then one with them; medians of rounds\n",
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
	}{{"without bombs", r.Quiet}, {"with bombs", r.Bombed}} {
		rate, answers := "-", "-"
		if row.s.Refused != nil {
			rate = fmt.Sprintf("%.0f", row.s.BombsPerSecond)
			answers = refusedText(row.s.Refused)
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%.1f\t%s\t%s\t\n", row.name, row.s.GetSessionP50, row.s.GetSessionP99,
			row.s.TurnP50, row.s.TurnP99, fmtBytes(float64(row.s.PeakRSS)), fmtBytes(float64(row.s.AddedRSS)), row.s.GatewayCPU, rate, answers)
	}
	tw.Flush()
	fmt.Fprintf(w, "  with / without, p50: GetSession %.2fx (rounds %s), Prompt turn %.2fx (rounds %s)\n",
		r.GetP50Ratio, joinRatios(r.RoundGetP50Ratios), r.TurnP50Ratio, joinRatios(r.RoundTurnP50Ratios))
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
