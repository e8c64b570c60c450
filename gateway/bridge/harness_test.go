package bridge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	acp "github.com/coder/acp-go-sdk"
	"go.uber.org/goleak"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

func TestMain(m *testing.M) {
	agentsim.ServeIfCommanded()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testToken is the token the gateways of the tests accept, for user "tester".
const testToken = "s3cret-token"

// tokenAuth accepts testToken.
type tokenAuth struct{}

func (tokenAuth) Authenticate(_ context.Context, h http.Header) (string, error) {
	if tok, ok := auth.BearerToken(h); ok && tok == testToken {
		return "tester", nil
	}
	return "", fmt.Errorf("%w: unknown bearer token", auth.ErrUnauthenticated)
}

// gateway is a real gateway on a loopback port: memory store, the scripts
// as agents (this test binary re-executed), bearer-token auth.
type gateway struct {
	base   string
	client acpv2connect.SessionServiceClient // authenticated
}

// startGateway runs a gateway with the agents scripts; configure, when
// given, changes its configuration last.
func startGateway(t *testing.T, scripts map[string]agentsim.Script, configure ...func(*app.Config)) *gateway {
	t.Helper()
	agents := map[string][]string{}
	for name, s := range scripts {
		cmd, err := agentsim.Command(s)
		if err != nil {
			t.Fatal(err)
		}
		agents[name] = cmd
	}
	cfg := app.Config{
		Session: session.Options{
			Agents:            agents,
			Env:               []string{"PATH=" + os.Getenv("PATH")},
			Store:             statestore.NewMemory(statestore.Options{}),
			PermissionTimeout: time.Minute,
			AgentStopGrace:    500 * time.Millisecond,
			IdleTimeout:       -1,
		},
		Auth:      tokenAuth{},
		AnyCwd:    true, // the editors' cwd are temporary directories
		Heartbeat: time.Minute,
	}
	for _, c := range configure {
		c(&cfg)
	}
	gw, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections) // after the gateway's shutdown
	base, _ := testutil.Serve(t, gw.Server.Serve, gw.Shutdown)
	return &gateway{base: base, client: bridge.NewClient(hc, base, testToken)}
}

// snapshot returns the gateway's view of session id.
func (g *gateway) snapshot(t *testing.T, id string) *acpv2.SessionSnapshot {
	t.Helper()
	res, err := g.client.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		t.Fatalf("GetSession(%s): %v", id, err)
	}
	return res.Msg.GetSession()
}

// toolCall returns the stored tool call id of session sid.
func (g *gateway) toolCall(t *testing.T, sid, id string) *acpv2.ToolCall {
	t.Helper()
	for _, tc := range g.snapshot(t, sid).GetToolCalls() {
		if tc.GetToolCallId() == id {
			return tc
		}
	}
	t.Fatalf("session %s has no tool call %s", sid, id)
	return nil
}

// editor is the ACP SDK's client side, connected to a bridge that runs as
// a function over a pair of pipes.
type editor struct {
	*acp.ClientSideConnection
	rec *recorder
	// in is the bridge's stdin: closing it is the editor going away.
	in *io.PipeWriter
	// served is closed when Serve returned servedErr.
	served    chan struct{}
	servedErr error
}

// wait waits for Serve to return and returns its result.
func (e *editor) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-e.served:
		return e.servedErr
	case <-time.After(20 * time.Second):
		t.Fatal("the bridge did not return after its input closed")
	}
	return nil
}

// bridgeOptions are the options of a test bridge before changes.
func bridgeOptions(g *gateway, agent string) bridge.Options {
	return bridge.Options{Client: g.client, Agent: agent}
}

// startEditor runs a bridge with opts and an SDK client on its stdio.
// answer, when set, answers the bridge's permission requests.
func startEditor(t *testing.T, opts bridge.Options, answer func(context.Context, acp.RequestPermissionRequest) acp.RequestPermissionResponse) *editor {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	rec := &recorder{answer: answer, window: make(chan struct{}, updateWindow)}
	e := &editor{rec: rec, in: inW, served: make(chan struct{})}
	go func() {
		e.servedErr = bridge.Serve(context.Background(), inR, outW, opts)
		close(e.served)
	}()
	stop := make(chan struct{})
	e.ClientSideConnection = acp.NewClientSideConnection(rec, inW, &pacedReader{r: bufio.NewReader(outR), window: rec.window, stop: stop})
	e.SetLogger(slog.New(slog.DiscardHandler))
	t.Cleanup(func() {
		close(stop)
		inW.Close()
		if err := e.wait(t); err != nil {
			t.Errorf("Serve: %v", err)
		}
		outR.Close()
	})
	return e
}

// updateWindow is how many session/update notifications the test editor
// reads ahead of those it has handled.
const updateWindow = 256

// pacedReader is the test editor's end of the bridge's output. The SDK
// reads its input as fast as it comes into a queue of 1,024 notifications,
// and drops the connection when its handler falls that far behind (the
// prompt then fails with "peer disconnected before response"), which a
// flood of updates on a busy host brings about whatever the bridge does.
// This reader hands the SDK no more than updateWindow session/update
// notifications ahead of those the recorder took: an editor that reads as
// it handles, which pushes back on the bridge.
type pacedReader struct {
	r *bufio.Reader
	// window holds a token for each update handed on that the recorder
	// has not taken.
	window chan struct{}
	// stop, closed as the test ends, lets everything through.
	stop <-chan struct{}
	line []byte // the rest of the line being read
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if len(p.line) == 0 {
		line, err := p.r.ReadBytes('\n')
		if len(line) == 0 {
			return 0, err
		}
		var m struct {
			Method string           `json:"method"`
			ID     *json.RawMessage `json:"id"`
		}
		if json.Unmarshal(line, &m) == nil && m.Method == "session/update" && m.ID == nil {
			select {
			case p.window <- struct{}{}:
			case <-p.stop:
			}
		}
		p.line = line
	}
	n := copy(b, p.line)
	p.line = p.line[n:]
	return n, nil
}

// ctx returns a context that ends with the test or after 30 s.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// initialize runs initialize with protocol version 1.
func (e *editor) initialize(t *testing.T) acp.InitializeResponse {
	t.Helper()
	res, err := e.Initialize(testCtx(t), acp.InitializeRequest{
		ProtocolVersion:    acp.ProtocolVersionNumber,
		ClientCapabilities: acp.ClientCapabilities{Fs: acp.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}},
	})
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return res
}

// newSession runs session/new in a new temporary directory.
func (e *editor) newSession(t *testing.T) string {
	t.Helper()
	res, err := e.NewSession(testCtx(t), acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	return string(res.SessionId)
}

// prompt runs session/prompt with one text block.
func (e *editor) prompt(ctx context.Context, sid, text string) (acp.PromptResponse, error) {
	return e.Prompt(ctx, acp.PromptRequest{SessionId: acp.SessionId(sid), Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
}

// recorder is the SDK client: it records what the bridge sends.
type recorder struct {
	answer func(context.Context, acp.RequestPermissionRequest) acp.RequestPermissionResponse
	// window takes back a token of the pacedReader's for each update
	// (one the SDK could not decode keeps its token: a few do no harm).
	window chan struct{}

	mu      sync.Mutex
	updates []acp.SessionUpdate
	asks    []acp.RequestPermissionRequest
}

func (r *recorder) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates = append(r.updates, n.Update)
	select {
	case <-r.window:
	default: // let through as the test ended
	}
	return nil
}

func (r *recorder) RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	r.mu.Lock()
	r.asks = append(r.asks, p)
	r.mu.Unlock()
	if r.answer == nil {
		return cancelledOutcome(), nil
	}
	return r.answer(ctx, p), nil
}

func (r *recorder) snapshot() ([]acp.SessionUpdate, []acp.RequestPermissionRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.updates), slices.Clone(r.asks)
}

func (r *recorder) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, errors.New("the bridge must not call fs/read_text_file")
}

func (r *recorder) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, errors.New("the bridge must not call fs/write_text_file")
}

func (r *recorder) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, errors.New("no terminals")
}

func (r *recorder) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, errors.New("no terminals")
}

func (r *recorder) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, errors.New("no terminals")
}

func (r *recorder) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, errors.New("no terminals")
}

func (r *recorder) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, errors.New("no terminals")
}

// choose answers a permission request with its first option of kind.
func choose(kind acp.PermissionOptionKind) func(context.Context, acp.RequestPermissionRequest) acp.RequestPermissionResponse {
	return func(_ context.Context, p acp.RequestPermissionRequest) acp.RequestPermissionResponse {
		for _, o := range p.Options {
			if o.Kind == kind {
				return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
					Selected: &acp.RequestPermissionOutcomeSelected{Outcome: "selected", OptionId: o.OptionId}}}
			}
		}
		return cancelledOutcome()
	}
}

func cancelledOutcome() acp.RequestPermissionResponse {
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
		Cancelled: &acp.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}}
}

// texts returns the text of the updates' agent message chunks.
func texts(updates []acp.SessionUpdate) []string {
	var out []string
	for _, u := range updates {
		if c := u.AgentMessageChunk; c != nil && c.Content.Text != nil {
			out = append(out, c.Content.Text.Text)
		}
	}
	return out
}

// countedTurn initializes, creates a session and runs a turn, which must
// end with end_turn and bring the editor n agent message chunks, "1" to
// n, each once and in order.
func (e *editor) countedTurn(t *testing.T, n int) {
	t.Helper()
	e.initialize(t)
	res, err := e.prompt(testCtx(t), e.newSession(t), "count")
	if err != nil {
		t.Fatalf("session/prompt: %v", err)
	}
	if res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("stopReason %q, want end_turn", res.StopReason)
	}
	updates, _ := e.rec.snapshot()
	got := texts(updates)
	if len(got) != n {
		t.Fatalf("the editor got %d chunks, want %d", len(got), n)
	}
	for i, s := range got {
		if s != strconv.Itoa(i+1) {
			t.Fatalf("chunk %d is %q, want %d", i, s, i+1)
		}
	}
}

// rawEditor speaks JSON-RPC to a bridge line by line, for what the SDK
// cannot show: the exact order of messages, ACP v2, malformed input.
type rawEditor struct {
	t  *testing.T
	in *io.PipeWriter
	// lines receives every line the bridge writes.
	lines chan map[string]any
}

func startRawEditor(t *testing.T, opts bridge.Options) *rawEditor {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- bridge.Serve(context.Background(), inR, outW, opts) }()
	r := &rawEditor{t: t, in: inW, lines: make(chan map[string]any, 1000)}
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("the bridge wrote a line that is not JSON: %q", sc.Text())
				continue
			}
			r.lines <- m
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("the bridge did not return after its input closed")
		}
		outR.Close()
	})
	return r
}

// send writes one line.
func (r *rawEditor) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		r.t.Fatalf("writing to the bridge: %v", err)
	}
}

// next returns the bridge's next message.
func (r *rawEditor) next() map[string]any {
	r.t.Helper()
	select {
	case m, ok := <-r.lines:
		if !ok {
			r.t.Fatal("the bridge closed its output")
		}
		return m
	case <-time.After(15 * time.Second):
		r.t.Fatal("timed out waiting for the bridge")
	}
	return nil
}

// until returns the messages up to and including the first for which stop
// holds.
func (r *rawEditor) until(stop func(map[string]any) bool) []map[string]any {
	r.t.Helper()
	var out []map[string]any
	for {
		m := r.next()
		out = append(out, m)
		if stop(m) {
			return out
		}
	}
}

// isResponse reports whether m answers request id (a JSON number).
func isResponse(id float64) func(map[string]any) bool {
	return func(m map[string]any) bool {
		v, ok := m["id"].(float64)
		_, isReq := m["method"]
		return ok && !isReq && v == id
	}
}

// updateOf returns the `update` of a session/update notification, or nil.
func updateOf(m map[string]any) map[string]any {
	if m["method"] != "session/update" {
		return nil
	}
	p, _ := m["params"].(map[string]any)
	u, _ := p["update"].(map[string]any)
	return u
}

// js decodes a JSON literal, for comparisons.
func js(s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		panic(err)
	}
	return v
}

func update(s string) agentsim.Step { return agentsim.Step{Update: json.RawMessage(s)} }

func sleep(d time.Duration) agentsim.Step { return agentsim.Step{Sleep: agentsim.Duration(d)} }
