package agentsim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/sourcegraph/jsonrpc2"
)

// testTimeout bounds every wait of a test.
const testTimeout = 10 * time.Second

// update is one session/update notification the client received.
type update struct {
	SessionID string          `json:"sessionId"`
	Update    json.RawMessage `json:"update"`
}

// kind returns the update's sessionUpdate discriminator.
func (u update) kind() string {
	var v struct {
		SessionUpdate string `json:"sessionUpdate"`
	}
	_ = json.Unmarshal(u.Update, &v)
	return v.SessionUpdate
}

// text returns the text of a content-chunk update.
func (u update) text() string {
	var v struct {
		Content struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(u.Update, &v)
	return v.Content.Text
}

// permissionRequest is a session/request_permission call the test answers.
type permissionRequest struct {
	Params json.RawMessage
	reply  chan any
}

// answer replies to the request with result.
func (p *permissionRequest) answer(result any) { p.reply <- result }

func selected(optionID string) any {
	return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": optionID}}
}

var cancelledOutcome = map[string]any{"outcome": map[string]any{"outcome": "cancelled"}}

// fileWrite is an fs/write_text_file call the client received.
type fileWrite struct {
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
	Content   string `json:"content"`
}

// clientConfig decides how the test client answers the agent's requests.
type clientConfig struct {
	// permit answers permission requests; nil hands them to the test
	// through harness.permissions.
	permit func(params json.RawMessage) any
	// files are the contents fs/read_text_file serves; other paths fail.
	files map[string]string
	// opts are passed to Serve.
	opts []agentsim.Option
}

// harness runs Serve against a real JSON-RPC client over io.Pipe pairs.
type harness struct {
	t    *testing.T
	ctx  context.Context
	conn *jsonrpc2.Conn
	cfg  clientConfig

	stopServe context.CancelFunc
	served    chan struct{}
	serveErr  error
	stderr    *testutil.SyncBuffer

	permissions chan *permissionRequest

	mu      sync.Mutex
	updates []update
	writes  []fileWrite
	changed chan struct{}
}

func start(t *testing.T, s agentsim.Script, cfg clientConfig) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	serveCtx, stopServe := context.WithCancel(ctx)

	agentIn, clientOut := io.Pipe()
	clientIn, agentOut := io.Pipe()
	h := &harness{
		t:           t,
		ctx:         ctx,
		cfg:         cfg,
		stopServe:   stopServe,
		served:      make(chan struct{}),
		stderr:      &testutil.SyncBuffer{},
		permissions: make(chan *permissionRequest, 16),
		changed:     make(chan struct{}),
	}
	go func() {
		defer close(h.served)
		h.serveErr = agentsim.Serve(serveCtx, agentIn, agentOut, s, h.stderr, cfg.opts...)
	}()
	h.conn = jsonrpc2.NewConn(ctx, jsonrpc2.NewPlainObjectStream(pipeRWC{clientIn, clientOut}), h,
		jsonrpc2.SetLogger(log.New(io.Discard, "", 0)))
	t.Cleanup(func() {
		stopServe()
		select {
		case <-h.served:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
		_ = h.conn.Close()
	})
	return h
}

// Handle records notifications in order on the read loop and answers
// requests in their own goroutines, so a pending permission request does not
// block the notifications behind it.
func (h *harness) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if req.Notif {
		if req.Method == "session/update" && req.Params != nil {
			var u update
			if err := json.Unmarshal(*req.Params, &u); err != nil {
				h.t.Errorf("session/update params %s: %v", *req.Params, err)
				return
			}
			h.mu.Lock()
			h.updates = append(h.updates, u)
			close(h.changed)
			h.changed = make(chan struct{})
			h.mu.Unlock()
		}
		return
	}
	go h.answer(ctx, conn, req)
}

func (h *harness) answer(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var params json.RawMessage
	if req.Params != nil {
		params = *req.Params
	}
	switch req.Method {
	case "session/request_permission":
		var result any
		if h.cfg.permit != nil {
			result = h.cfg.permit(params)
		} else {
			p := &permissionRequest{Params: params, reply: make(chan any, 1)}
			h.permissions <- p
			select {
			case result = <-p.reply:
			case <-ctx.Done():
				return
			}
		}
		_ = conn.Reply(ctx, req.ID, result)
	case "elicitation/create":
		// Accepted, the message and session echoed as content.
		var p struct {
			SessionID string `json:"sessionId"`
			Message   string `json:"message"`
		}
		_ = json.Unmarshal(params, &p)
		_ = conn.Reply(ctx, req.ID, map[string]any{"action": "accept", "content": map[string]string{"message": p.Message, "session": p.SessionID}})
	case "fs/read_text_file":
		var p struct {
			Path string `json:"path"`
		}
		_ = json.Unmarshal(params, &p)
		content, ok := h.cfg.files[p.Path]
		if !ok {
			_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: -32002, Message: "no such file"})
			return
		}
		_ = conn.Reply(ctx, req.ID, map[string]string{"content": content})
	case "fs/write_text_file":
		var w fileWrite
		_ = json.Unmarshal(params, &w)
		if strings.Contains(w.Path, "readonly") {
			_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeInternalError, Message: "read-only file system"})
			return
		}
		h.mu.Lock()
		h.writes = append(h.writes, w)
		h.mu.Unlock()
		_ = conn.Reply(ctx, req.ID, nil)
	default:
		_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: req.Method})
	}
}

// call makes a request and fails the test on error.
func (h *harness) call(method string, params, result any) {
	h.t.Helper()
	if err := h.conn.Call(h.ctx, method, params, result); err != nil {
		h.t.Fatalf("%s: %v", method, err)
	}
}

// callError makes a request that must fail and returns its JSON-RPC error.
func (h *harness) callError(method string, params any) *jsonrpc2.Error {
	h.t.Helper()
	err := h.conn.Call(h.ctx, method, params, nil)
	var e *jsonrpc2.Error
	if !errors.As(err, &e) {
		h.t.Fatalf("%s: got %v, want a JSON-RPC error", method, err)
	}
	return e
}

func (h *harness) notify(method string, params any) {
	h.t.Helper()
	if err := h.conn.Notify(h.ctx, method, params); err != nil {
		h.t.Fatalf("notify %s: %v", method, err)
	}
}

func (h *harness) initialize() map[string]any {
	h.t.Helper()
	var res map[string]any
	h.call("initialize", map[string]any{
		"protocolVersion":    1,
		"clientCapabilities": map[string]any{"fs": map[string]bool{"readTextFile": true, "writeTextFile": true}},
	}, &res)
	return res
}

func (h *harness) newSession(cwd string) string {
	h.t.Helper()
	var res struct {
		SessionID string `json:"sessionId"`
	}
	h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}, &res)
	return res.SessionID
}

// prompt sends session/prompt without waiting for its answer.
func (h *harness) prompt(sessionID string) *pendingPrompt {
	h.t.Helper()
	w, err := h.conn.DispatchCall(h.ctx, "session/prompt", map[string]any{
		"sessionId": sessionID,
		"prompt":    []any{map[string]string{"type": "text", "text": "hello"}},
	})
	if err != nil {
		h.t.Fatalf("session/prompt: %v", err)
	}
	p := &pendingPrompt{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var res struct {
			StopReason string `json:"stopReason"`
		}
		p.err = w.Wait(h.ctx, &res)
		p.stopReason = res.StopReason
	}()
	return p
}

// run prompts and waits for the stop reason.
func (h *harness) run(sessionID string) string {
	h.t.Helper()
	return h.prompt(sessionID).wait(h.t)
}

type pendingPrompt struct {
	done       chan struct{}
	stopReason string
	err        error
}

// wait returns the stop reason and fails the test on error.
func (p *pendingPrompt) wait(t *testing.T) string {
	t.Helper()
	<-p.done
	if p.err != nil {
		t.Fatalf("session/prompt: %v", p.err)
	}
	return p.stopReason
}

// answered reports whether the prompt was answered within d.
func (p *pendingPrompt) answered(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// waitUpdates waits until at least n updates arrived and returns them all.
func (h *harness) waitUpdates(n int) []update {
	h.t.Helper()
	for {
		h.mu.Lock()
		got, ch := append([]update(nil), h.updates...), h.changed
		h.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-ch:
		case <-h.ctx.Done():
			h.t.Fatalf("waiting for %d updates, got %d: %v", n, len(got), got)
		}
	}
}

// allUpdates returns the updates received so far.
func (h *harness) allUpdates() []update {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]update(nil), h.updates...)
}

func (h *harness) fileWrites() []fileWrite {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]fileWrite(nil), h.writes...)
}

// nextPermission waits for a permission request.
func (h *harness) nextPermission() *permissionRequest {
	h.t.Helper()
	select {
	case p := <-h.permissions:
		return p
	case <-h.ctx.Done():
		h.t.Fatal("no permission request arrived")
		return nil
	}
}

// serveResult waits for Serve to return and returns its error.
func (h *harness) serveResult(d time.Duration) error {
	h.t.Helper()
	select {
	case <-h.served:
		return h.serveErr
	case <-time.After(d):
		h.t.Fatalf("Serve did not return within %v", d)
		return nil
	}
}

type pipeRWC struct {
	io.Reader
	io.WriteCloser
}

func (p pipeRWC) Close() error {
	if c, ok := p.Reader.(io.Closer); ok {
		_ = c.Close()
	}
	return p.WriteCloser.Close()
}

// rawHarness talks to Serve line by line, for output that is not JSON.
type rawHarness struct {
	t     *testing.T
	w     io.Writer
	lines chan string
}

func startRaw(t *testing.T, s agentsim.Script) *rawHarness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	agentIn, clientOut := io.Pipe()
	clientIn, agentOut := io.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = agentsim.Serve(ctx, agentIn, agentOut, s, io.Discard)
	}()
	r := &rawHarness{t: t, w: clientOut, lines: make(chan string, 100)}
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(clientIn)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	return r
}

func (r *rawHarness) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.w, line+"\n"); err != nil {
		r.t.Fatalf("writing %q: %v", line, err)
	}
}

func (r *rawHarness) next() string {
	r.t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			r.t.Fatal("agent output ended")
		}
		return l
	case <-time.After(testTimeout):
		r.t.Fatal("no line from the agent")
		return ""
	}
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func ptr[T any](v T) *T { return &v }
