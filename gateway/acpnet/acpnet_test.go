package acpnet_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/acp-gateway/acp-gateway/gateway/acpnet"
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
	goleak.VerifyTestMain(m)
}

// Tokens of the test gateways' two users.
const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789"
)

type tokenAuth struct{}

func (tokenAuth) Authenticate(_ context.Context, h http.Header) (string, error) {
	switch tok, _ := auth.BearerToken(h); tok {
	case aliceToken:
		return "alice", nil
	case bobToken:
		return "bob", nil
	}
	return "", fmt.Errorf("%w: unknown bearer token", auth.ErrUnauthenticated)
}

func update(s string) agentsim.Step { return agentsim.Step{Update: json.RawMessage(s)} }

// helloScript's turns say hello.
var helloScript = agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hello "}}`),
	update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"world"}}`),
}, StopReason: "end_turn"}}}

// permissionScript's turn asks permission to edit, and edits when allowed.
var permissionScript = agentsim.Script{Turns: []agentsim.Turn{{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"tool_call","toolCallId":"c2","title":"Edit b.go","kind":"edit","status":"pending"}`),
	{Permission: &agentsim.Permission{
		ToolCall: json.RawMessage(`{"toolCallId":"c2","title":"Edit b.go"}`),
		Allowed:  []agentsim.Step{update(`{"sessionUpdate":"tool_call_update","toolCallId":"c2","status":"completed"}`)},
		Rejected: []agentsim.Step{update(`{"sessionUpdate":"tool_call_update","toolCallId":"c2","status":"failed"}`)},
	}},
}, StopReason: "end_turn"}}}

// elicitScript is an agent whose turn asks the user for a name (an
// elicitation in form mode). It is "who": the tests' default agent is
// the first by name, "other".
var elicitScript = agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
	{Elicit: json.RawMessage(`{"mode":"form","message":"Who?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`)},
}, StopReason: "end_turn"}}}

// gateway is a real gateway with /acp on a loopback port.
type gateway struct {
	base string
	// ws is base's ws:// form.
	ws string
	// connect calls the Connect API as a user, by token.
	connect func(token string) acpv2connect.SessionServiceClient
}

func startGateway(t *testing.T, cfg app.Config) *gateway {
	t.Helper()
	agents := map[string][]string{}
	for name, script := range map[string]agentsim.Script{"sim": helloScript, "other": helloScript, "perm": permissionScript, "who": elicitScript} {
		cmd, err := agentsim.Command(script)
		if err != nil {
			t.Fatal(err)
		}
		agents[name] = cmd
	}
	cfg.Session = session.Options{
		Agents:            agents,
		Env:               []string{"PATH=" + os.Getenv("PATH")},
		Store:             statestore.NewMemory(statestore.Options{}),
		PermissionTimeout: time.Minute,
		AgentStopGrace:    500 * time.Millisecond,
		IdleTimeout:       -1,
	}
	cfg.Auth = tokenAuth{}
	cfg.AnyCwd = true
	cfg.ACP = true
	gw, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	base, _ := testutil.Serve(t, gw.Server.Serve, gw.Shutdown)
	if cfg.TLS != nil {
		base = "https" + strings.TrimPrefix(base, "http")
	}
	return &gateway{
		base:    base,
		ws:      "ws" + strings.TrimPrefix(base, "http"),
		connect: func(token string) acpv2connect.SessionServiceClient { return bridge.NewClient(hc, base, token) },
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// client is a raw ACP client over a WebSocket.
type client struct {
	t *testing.T
	c *websocket.Conn
}

// dial opens a WebSocket to url with opts; it fails the test unless it
// succeeds.
func dial(t *testing.T, url string, opts *websocket.DialOptions) (*client, *http.Response) {
	t.Helper()
	c, res, err := websocket.Dial(testCtx(t), url, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return &client{t: t, c: c}, res
}

func bearer(token string) *websocket.DialOptions {
	return &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}}
}

func (c *client) send(msg string) {
	c.t.Helper()
	if err := c.c.Write(testCtx(c.t), websocket.MessageText, []byte(msg)); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *client) next() map[string]any {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, b, err := c.c.Read(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("the gateway sent %q", b)
	}
	return m
}

// call sends request id and returns its answer, and the messages before
// it.
func (c *client) call(id int, method, params string) (answer map[string]any, before []map[string]any) {
	c.t.Helper()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))
	return c.untilAnswer(id)
}

// untilAnswer returns the answer to request id, and the messages before
// it.
func (c *client) untilAnswer(id int) (answer map[string]any, before []map[string]any) {
	c.t.Helper()
	for {
		m := c.next()
		if m["id"] == float64(id) && m["method"] == nil {
			return m, before
		}
		before = append(before, m)
	}
}

// newSession initializes (v1) and creates a session in a new directory.
func (c *client) newSession(meta string) string {
	c.t.Helper()
	if res, _ := c.call(0, "initialize", `{"protocolVersion":1}`); res["result"] == nil {
		c.t.Fatalf("initialize answered %v", res)
	}
	params := fmt.Sprintf(`{"cwd":%q,"mcpServers":[]%s}`, c.t.TempDir(), meta)
	res, _ := c.call(1, "session/new", params)
	sid, _ := res["result"].(map[string]any)["sessionId"].(string)
	if sid == "" {
		c.t.Fatalf("session/new answered %v", res)
	}
	return sid
}

// texts returns the text chunks of session/update notifications.
func texts(msgs []map[string]any) []string {
	var out []string
	for _, m := range msgs {
		p, _ := m["params"].(map[string]any)
		u, _ := p["update"].(map[string]any)
		if c, _ := u["content"].(map[string]any); m["method"] == "session/update" && c["text"] != nil {
			out = append(out, u["sessionUpdate"].(string)+":"+c["text"].(string))
		}
	}
	return out
}

func TestWebSocketServesACPAsTheAuthenticatedUser(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	c, res := dial(t, g.ws+"/acp", bearer(aliceToken))
	if res.Header.Get("Acp-Connection-Id") == "" {
		t.Error("the upgrade has no Acp-Connection-Id")
	}
	sid := c.newSession("")
	if got := scrape(t, g.base, `acp_gateway_acp_connections{transport="websocket"}`); got != "1" {
		t.Errorf("acp_gateway_acp_connections is %q with one WebSocket open, want 1", got)
	}
	answer, before := c.call(2, "session/prompt", `{"sessionId":"`+sid+`","prompt":[{"type":"text","text":"hi"}]}`)
	if r, _ := answer["result"].(map[string]any); r["stopReason"] != "end_turn" {
		t.Fatalf("session/prompt answered %v", answer)
	}
	if got, want := texts(before), []string{"agent_message_chunk:Hello ", "agent_message_chunk:world"}; !reflect.DeepEqual(got, want) {
		t.Errorf("updates %q, want %q", got, want)
	}
	// The session is alice's, on the Connect API too.
	snap, err := g.connect(aliceToken).GetSession(testCtx(t), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: sid}))
	if err != nil || snap.Msg.GetSession().GetAgent() != "other" && snap.Msg.GetSession().GetAgent() != "sim" {
		t.Fatalf("GetSession as alice: %v %v", snap, err)
	}
	if got := snap.Msg.GetSession().GetAgent(); got != "other" {
		t.Errorf("/acp ran agent %q, want the first by name, other", got)
	}
	if _, err := g.connect(bobToken).GetSession(testCtx(t), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: sid})); connect.CodeOf(err) != connect.CodeNotFound && connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("GetSession as bob: %v, want the session hidden", err)
	}
}

// scrape returns the value of series in the gateway's /metrics.
func scrape(t *testing.T, base, series string) string {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestAgentByPathOrMeta(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	agentOf := func(sid string) string {
		res, err := g.connect(aliceToken).GetSession(testCtx(t), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: sid}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetSession().GetAgent()
	}
	c, _ := dial(t, g.ws+"/acp/sim", bearer(aliceToken))
	if got := agentOf(c.newSession("")); got != "sim" {
		t.Errorf("/acp/sim ran %q", got)
	}
	c, _ = dial(t, g.ws+"/acp", bearer(aliceToken))
	if got := agentOf(c.newSession(`,"_meta":{"acpGateway":{"agent":"sim"}}`)); got != "sim" {
		t.Errorf("/acp with _meta agent sim ran %q", got)
	}
	_, res, err := websocket.Dial(testCtx(t), g.ws+"/acp/nope", bearer(aliceToken))
	if err == nil || res == nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("/acp/nope: %v, %v; want 404", res, err)
	}
}

func TestWebSocketRefusals(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	for _, tc := range []struct {
		name string
		url  string
		opts *websocket.DialOptions
		want int
	}{
		{"no token", "/acp", nil, http.StatusUnauthorized},
		{"bad token", "/acp", bearer("guess-0123456789"), http.StatusUnauthorized},
		// Agent names are not told to whoever asks.
		{"no token, unknown agent", "/acp/nope", nil, http.StatusUnauthorized},
		{"another site's page", "/acp", &websocket.DialOptions{HTTPHeader: http.Header{
			"Authorization": {"Bearer " + aliceToken}, "Origin": {"https://evil.example"}}}, http.StatusForbidden},
		{"rebinding", "/acp", &websocket.DialOptions{Host: "evil.example:80", HTTPHeader: http.Header{
			"Authorization": {"Bearer " + aliceToken}}}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, res, err := websocket.Dial(testCtx(t), g.ws+tc.url, tc.opts)
			if err == nil {
				_ = c.CloseNow()
			}
			if res == nil || res.StatusCode != tc.want {
				t.Errorf("got %v, %v; want %d", res, err, tc.want)
			}
		})
	}
	// Streamable HTTP is not served yet: a plain GET or POST is refused.
	res, err := http.Post(g.base+"/acp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /acp without a token: %d, want 401", res.StatusCode)
	}
}

// TestTokenAsSubprotocol: a browser, which cannot set Authorization on a
// WebSocket, offers the token as a subprotocol beside "acp"; the gateway
// selects "acp", never the token's.
func TestTokenAsSubprotocol(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	proto := acpnet.TokenProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(aliceToken))
	c, res := dial(t, g.ws+"/acp", &websocket.DialOptions{Subprotocols: []string{proto, acpnet.Subprotocol}})
	if got := res.Header.Get("Sec-WebSocket-Protocol"); got != acpnet.Subprotocol {
		t.Errorf("the gateway selected subprotocol %q, want %q", got, acpnet.Subprotocol)
	}
	c.newSession("")
	bad := acpnet.TokenProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte("guess-0123456789"))
	_, res, err := websocket.Dial(testCtx(t), g.ws+"/acp", &websocket.DialOptions{Subprotocols: []string{bad}})
	if err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token as subprotocol: %v, %v; want 401", res, err)
	}
}

func TestOversizedMessageClosesTheWebSocket(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{ReadMaxBytes: 4 << 10})
	c, _ := dial(t, g.ws+"/acp", bearer(aliceToken))
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"_meta":"` + strings.Repeat("x", 8<<10) + `"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, _, err := c.c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("read after an oversized message: %v, want a close with 1009", err)
	}
}

// TestSessionOutlivesTheConnection: session/load on a new connection
// replays what the first one saw.
func TestSessionOutlivesTheConnection(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	c, _ := dial(t, g.ws+"/acp", bearer(aliceToken))
	sid := c.newSession("")
	_, first := c.call(2, "session/prompt", `{"sessionId":"`+sid+`","prompt":[{"type":"text","text":"hi"}]}`)
	_ = c.c.Close(websocket.StatusNormalClosure, "")

	c2, _ := dial(t, g.ws+"/acp", bearer(aliceToken))
	c2.call(0, "initialize", `{"protocolVersion":1}`)
	answer, replayed := c2.call(1, "session/load", `{"sessionId":"`+sid+`","cwd":"/","mcpServers":[]}`)
	if answer["error"] != nil {
		t.Fatalf("session/load answered %v", answer)
	}
	got := texts(replayed)
	want := append([]string{"user_message_chunk:hi"}, texts(first)...)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replayed %q, want %q", got, want)
	}
	// Another user cannot load it.
	c3, _ := dial(t, g.ws+"/acp", bearer(bobToken))
	c3.call(0, "initialize", `{"protocolVersion":1}`)
	if answer, _ := c3.call(1, "session/load", `{"sessionId":"`+sid+`","cwd":"/","mcpServers":[]}`); answer["error"] == nil {
		t.Errorf("bob loaded alice's session: %v", answer)
	}
}

// TestShutdownEndsTheConnections: the server's shutdown closes the
// WebSockets it hijacked and the Streamable HTTP connections, and waits
// for them (goleak checks the rest).
func TestShutdownEndsTheConnections(t *testing.T) {
	t.Parallel()
	gw, err := app.New(context.Background(), app.Config{ACP: true, Session: session.Options{
		Agents: map[string][]string{"sim": {"true"}}, Store: statestore.NewMemory(statestore.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	base, stop := testutil.Serve(t, gw.Server.Serve, gw.Shutdown)
	c, _ := dial(t, "ws"+strings.TrimPrefix(base, "http")+"/acp", nil)
	c.call(0, "initialize", `{"protocolVersion":1}`)
	h := &httpClient{t: t, url: base + "/acp"}
	h.initialize()
	events, stopStream := h.stream("", nil)
	defer stopStream()
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, _, err := c.c.Read(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read after shutdown: %v, want the connection closed", err)
	}
	select {
	case _, ok := <-events:
		if ok {
			t.Error("an SSE event after shutdown")
		}
	case <-ctx.Done():
		t.Error("the SSE stream outlived the shutdown")
	}
}

// TestOffWithoutACP: a gateway without ACP has no /acp.
func TestOffWithoutACP(t *testing.T) {
	t.Parallel()
	gw, err := app.New(context.Background(), app.Config{Session: session.Options{
		Agents: map[string][]string{"sim": {"true"}}, Store: statestore.NewMemory(statestore.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := testutil.Serve(t, gw.Server.Serve, gw.Shutdown)
	_, res, err := websocket.Dial(testCtx(t), "ws"+strings.TrimPrefix(base, "http")+"/acp", nil)
	if err == nil || res == nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("/acp without ACP: %v, %v; want 404", res, err)
	}
}

// TestSessionOfTheConnectAPIOverACP: a session made over the Connect API
// is loaded over /acp, with its history.
func TestSessionOfTheConnectAPIOverACP(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	api := g.connect(aliceToken)
	created, err := api.CreateSession(testCtx(t), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	sid := created.Msg.GetSessionId()
	stream, err := api.Prompt(testCtx(t), connect.NewRequest(&acpv2.PromptRequest{SessionId: sid,
		Prompt: []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "hi"}}}}}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if err := stream.Close(); err != nil {
		t.Fatal(err)
	}
	c, _ := dial(t, g.ws+"/acp/sim", bearer(aliceToken))
	c.call(0, "initialize", `{"protocolVersion":1}`)
	_, replayed := c.call(1, "session/load", `{"sessionId":"`+sid+`","cwd":"/","mcpServers":[]}`)
	if got, want := texts(replayed), []string{"user_message_chunk:hi", "agent_message_chunk:Hello ", "agent_message_chunk:world"}; !reflect.DeepEqual(got, want) {
		t.Errorf("session/load replayed %q, want %q", got, want)
	}
}

// TestCORSOriginMayOpenAWebSocket: a page of a --cors-origin opens a
// WebSocket (with its token as a subprotocol, as browsers must); a page
// of another site may not.
func TestCORSOriginMayOpenAWebSocket(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{CORSOrigins: []string{"https://app.example"}})
	proto := acpnet.TokenProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(aliceToken))
	c, _ := dial(t, g.ws+"/acp", &websocket.DialOptions{Subprotocols: []string{acpnet.Subprotocol, proto},
		HTTPHeader: http.Header{"Origin": {"https://app.example"}}})
	c.newSession("")
	_, res, err := websocket.Dial(testCtx(t), g.ws+"/acp", &websocket.DialOptions{Subprotocols: []string{proto},
		HTTPHeader: http.Header{"Origin": {"https://other.example"}}})
	if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("another site's page: %v, %v; want 403", res, err)
	}
}
