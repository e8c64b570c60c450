package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	acp "github.com/coder/acp-go-sdk"

	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

func TestConnectBadFlagsExit2WithOneLine(t *testing.T) {
	t.Parallel()
	tokenFile := writeTemp(t, "token", "tok\n")
	empty := writeTemp(t, "empty", "\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no URL", []string{"connect", "--agent", "a"}, "one gateway URL"},
		{"two URLs", []string{"connect", "http://a", "http://b", "--agent", "a"}, "one gateway URL"},
		{"not http", []string{"connect", "ftp://host", "--agent", "a"}, "gateway URL"},
		{"no host", []string{"connect", "http://", "--agent", "a"}, "gateway URL"},
		{"no agent", []string{"connect", "http://127.0.0.1:8080"}, "--agent"},
		{"two tokens", []string{"connect", "http://h", "--agent", "a", "--token", "x", "--token-file", tokenFile}, "at most one"},
		{"missing token file", []string{"connect", "http://h", "--agent", "a", "--token-file", "/nonexistent/token"}, "--token-file"},
		{"empty token file", []string{"connect", "http://h", "--agent", "a", "--token-file", empty}, "no token"},
		{"relative cwd", []string{"connect", "http://h", "--agent", "a", "--cwd", "src"}, "--cwd"},
		{"unknown flag", []string{"connect", "http://h", "--agent", "a", "--nope"}, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stdout, &stderr); code != exitUsage {
				t.Fatalf("exit %d, want %d (stderr %q)", code, exitUsage, stderr.String())
			}
			if lines := strings.Count(stderr.String(), "\n"); lines != 1 {
				t.Errorf("stderr has %d lines, want 1: %q", lines, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not name %q", stderr.String(), tc.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

func TestConnectFlagsAfterTheURLAndTheTokenFromTheEnvironment(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv(tokenEnv, "from-env")
	cfg, err := parseConnect([]string{"--agent", "a", "https://gw.example.com", "--cwd", "/srv/p", "--keep-sessions"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.url != "https://gw.example.com" || cfg.agent != "a" || cfg.cwd != "/srv/p" || !cfg.keepSessions || cfg.token != "from-env" {
		t.Errorf("config %+v", cfg)
	}
	cfg, err = parseConnect([]string{"https://gw.example.com", "--agent", "a", "--token", "from-flag"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.token != "from-flag" {
		t.Errorf("token %q, want the flag's", cfg.token)
	}
}

// TestConnectPlaysTheDemoForAnEditor runs `acp-gateway connect` through
// run(), with the ACP SDK's client on its stdin and stdout, against `serve`
// with a token file and the built-in demo agent.
func TestConnectPlaysTheDemoForAnEditor(t *testing.T) {
	// Not parallel: it sets the command's stdin.
	tokens := writeTemp(t, "tokens", "demo-token-0123456789 alice\n")
	tokenFile := writeTemp(t, "token", "demo-token-0123456789\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, served := startServe(t, ctx, "--auth-tokens", tokens, "--any-cwd")
	base := "http://" + addr
	workdir := t.TempDir()

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	old := stdin
	stdin = inR
	defer func() { stdin = old }()
	var stderr bytes.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"connect", base, "--agent", "demo", "--token-file", tokenFile, "--cwd", workdir}, outW, &stderr)
	}()

	rec := &demoEditor{}
	conn := acp.NewClientSideConnection(rec, inW, outR)
	if _, err := conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	created, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: "/editor/only/path", McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	res, err := conn.Prompt(ctx, acp.PromptRequest{SessionId: created.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("show me")}})
	if err != nil {
		t.Fatalf("session/prompt: %v", err)
	}
	if res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("stopReason %q", res.StopReason)
	}
	rec.mu.Lock()
	calls, asks, finished := rec.toolCalls, rec.asks, rec.completed
	rec.mu.Unlock()
	if strings.Join(calls, ",") != "demo-read,demo-edit,demo-exec" || asks != 1 || !finished["demo-edit"] || !finished["demo-exec"] {
		t.Errorf("tool calls %v, %d permission requests, completed %v", calls, asks, finished)
	}

	client := bridge.NewClient(http.DefaultClient, base, "demo-token-0123456789")
	snap, err := client.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: string(created.SessionId)}))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Msg.GetSession().GetCwd() != workdir {
		t.Errorf("the session runs in %q, want --cwd %q", snap.Msg.GetSession().GetCwd(), workdir)
	}

	inW.Close() // the editor goes
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("connect exited %d: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("connect did not exit after its stdin closed")
	}
	outR.Close()
	snap, err = client.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: string(created.SessionId)}))
	if err != nil {
		t.Fatal(err)
	}
	if state := snap.Msg.GetSession().GetState(); state != "closed" {
		t.Errorf("the session is %q after the editor went, want closed", state)
	}
	if strings.Contains(stderr.String(), "demo-token-0123456789") {
		t.Error("the token appears in the logs")
	}
	cancel()
	if code := <-served; code != 0 {
		t.Fatalf("serve exited %d", code)
	}
}

// demoEditor is an ACP client that allows what it is asked and notes the
// tool calls it sees.
type demoEditor struct {
	mu        sync.Mutex
	toolCalls []string
	completed map[string]bool
	asks      int
}

func (d *demoEditor) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if tc := n.Update.ToolCall; tc != nil {
		d.toolCalls = append(d.toolCalls, string(tc.ToolCallId))
	}
	if u := n.Update.ToolCallUpdate; u != nil && u.Status != nil && *u.Status == acp.ToolCallStatusCompleted {
		if d.completed == nil {
			d.completed = map[string]bool{}
		}
		d.completed[string(u.ToolCallId)] = true
	}
	return nil
}

func (d *demoEditor) RequestPermission(_ context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	d.mu.Lock()
	d.asks++
	d.mu.Unlock()
	for _, o := range p.Options {
		if o.Kind == acp.PermissionOptionKindAllowOnce {
			return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
				Selected: &acp.RequestPermissionOutcomeSelected{Outcome: "selected", OptionId: o.OptionId}}}, nil
		}
	}
	return acp.RequestPermissionResponse{}, errors.New("no allow option")
}

var errNotOffered = errors.New("not offered to the bridge")

func (d *demoEditor) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, errNotOffered
}

func (d *demoEditor) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, errNotOffered
}

func (d *demoEditor) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, errNotOffered
}

func (d *demoEditor) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, errNotOffered
}

func (d *demoEditor) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, errNotOffered
}

func (d *demoEditor) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, errNotOffered
}

func (d *demoEditor) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, errNotOffered
}

// connect and try warn of a token sent in clear to another host, and only
// then.
func TestTokenInClear(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url, token string
		warn       bool
	}{
		{"http://gw.example:8080", "tok", true},
		{"http://10.1.2.3", "tok", true},
		{"https://gw.example", "tok", false},
		{"http://127.0.0.1:8080", "tok", false},
		{"http://localhost:8080", "tok", false},
		{"http://[::1]:8080", "tok", false},
		{"http://gw.example", "", false},
	} {
		if got := tokenInClear(c.url, c.token) != ""; got != c.warn {
			t.Errorf("tokenInClear(%q, %q) warns %v, want %v", c.url, c.token, got, c.warn)
		}
	}
}

// TestConnectInitializeChecksTheGateway checks that the bridge fails the
// editor's initialize, saying why, when the gateway cannot be reached or
// has no such agent, rather than answering it as if all were well.
func TestConnectInitializeChecksTheGateway(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	addr, served := startServe(t, ctx)
	for _, tt := range []struct {
		name, url, agent, want string
	}{
		{"unreachable", closed, "demo", "acp-gateway initialize (asking the gateway for its agents) failed: unavailable: "},
		{"no such agent", "http://" + addr, "nope", `the gateway has no agent "nope" (it has demo)`},
		{"all well", "http://" + addr, "demo", ""},
	} {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		exited := make(chan int, 1)
		go func() {
			exited <- connectCmd(ctx, []string{tt.url, "--agent", tt.agent, "--log-level", "error"}, inR, outW, io.Discard)
			outW.Close()
		}()
		go fmt.Fprintln(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
		var answer struct {
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.NewDecoder(outR).Decode(&answer); err != nil {
			t.Fatalf("%s: no answer to initialize: %v", tt.name, err)
		}
		switch {
		case tt.want == "" && (answer.Error != nil || len(answer.Result) == 0):
			t.Errorf("%s: initialize answered %+v, want a result", tt.name, answer.Error)
		case tt.want != "" && (answer.Error == nil || !strings.Contains(answer.Error.Message, tt.want)):
			t.Errorf("%s: initialize answered %s / %+v, want an error saying %q", tt.name, answer.Result, answer.Error, tt.want)
		}
		inW.Close()
		go io.Copy(io.Discard, outR)
		if code := <-exited; code != 0 {
			t.Errorf("%s: connect exited %d", tt.name, code)
		}
	}
	cancel()
	<-served
}
