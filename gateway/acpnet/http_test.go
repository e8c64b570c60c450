package acpnet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/acp-gateway/acp-gateway/gateway/acpnet"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// httpClient is a raw client of the Streamable HTTP profile.
type httpClient struct {
	t     *testing.T
	url   string
	token string
	conn  string
}

func (c *httpClient) do(method, session string, body string, header http.Header) *http.Response {
	c.t.Helper()
	req, err := http.NewRequestWithContext(testCtx(c.t), method, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.conn != "" {
		req.Header.Set(acpnet.HeaderConnectionID, c.conn)
	}
	if session != "" {
		req.Header.Set(acpnet.HeaderSessionID, session)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, c.url, err)
	}
	return res
}

// post sends msg and checks the status.
func (c *httpClient) post(session, msg string, want int) {
	c.t.Helper()
	res := c.do(http.MethodPost, session, msg, nil)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != want {
		c.t.Fatalf("POST %s: %d %s, want %d", msg, res.StatusCode, b, want)
	}
}

// initialize opens the connection.
func (c *httpClient) initialize() map[string]any {
	c.t.Helper()
	res := c.do(http.MethodPost, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`, nil)
	defer res.Body.Close()
	var answer map[string]any
	if err := json.NewDecoder(res.Body).Decode(&answer); err != nil || res.StatusCode != http.StatusOK {
		c.t.Fatalf("initialize: %d %v", res.StatusCode, err)
	}
	if c.conn = res.Header.Get(acpnet.HeaderConnectionID); c.conn == "" {
		c.t.Fatal("initialize answered without " + acpnet.HeaderConnectionID)
	}
	return answer
}

// sseEvent is one event of an SSE stream.
type sseEvent struct {
	id  string
	msg map[string]any
}

// stream opens an SSE stream (session's, or the connection's) and returns
// its events as they come.
func (c *httpClient) stream(session string, header http.Header) (<-chan sseEvent, func()) {
	c.t.Helper()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Accept", "text/event-stream")
	res := c.do(http.MethodGet, session, "", header)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		c.t.Fatalf("GET (session %q): %d %s", session, res.StatusCode, b)
	}
	raw := make(chan testutil.SSEMessage, 1000)
	events := make(chan sseEvent, 1000)
	go testutil.ReadSSE(res.Body, raw)
	go func() {
		defer close(events)
		for m := range raw {
			events <- sseEvent{id: m.ID, msg: m.Msg}
		}
	}()
	return events, func() { res.Body.Close() }
}

func mustPosition(t *testing.T, id string) bridge.Position {
	t.Helper()
	at, err := bridge.ParsePosition(id)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

func next(t *testing.T, events <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("the SSE stream ended")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("timed out waiting for an SSE event")
	}
	return sseEvent{}
}

// until returns the events up to the answer to id.
func until(t *testing.T, events <-chan sseEvent, id float64) []sseEvent {
	t.Helper()
	var out []sseEvent
	for {
		ev := next(t, events)
		out = append(out, ev)
		if ev.msg["id"] == id && ev.msg["method"] == nil {
			return out
		}
	}
}

func TestStreamableHTTPServesACP(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	c := &httpClient{t: t, url: g.base + "/acp", token: aliceToken}
	if res, _ := c.initialize()["result"].(map[string]any); res["protocolVersion"] != float64(1) {
		t.Fatalf("initialize answered %v", res)
	}
	conn, stopConn := c.stream("", nil)
	defer stopConn()
	c.post("", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, t.TempDir()), http.StatusAccepted)
	created := next(t, conn)
	sid, _ := created.msg["result"].(map[string]any)["sessionId"].(string)
	if sid == "" || created.id != "1" {
		t.Fatalf("session/new answered %+v on the connection's stream, want event 1 with a session", created)
	}
	events, stop := c.stream(sid, nil)
	c.post(sid, `{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"`+sid+`","prompt":[{"type":"text","text":"hi"}]}}`, http.StatusAccepted)
	got := until(t, events, 2)
	// A session's SSE ids are its seqs: the seq of the event a message was
	// made from, else the place it follows and a count.
	var msgs []map[string]any
	prev := bridge.Position{}
	for i, ev := range got {
		at, err := bridge.ParsePosition(ev.id)
		base, extra, isExtra := strings.Cut(ev.id, ":")
		switch {
		case err != nil:
			t.Errorf("event %d has id %q: %v", i, ev.id, err)
		case ev.msg["method"] == "session/update" && (isExtra || !prev.Before(at)):
			t.Errorf("update %d has id %q after %s, want the seq of its event", i, ev.id, prev)
		case ev.msg["method"] == nil && (!isExtra || base != prev.String() || extra != "1"):
			t.Errorf("the answer has id %q, want %s:1", ev.id, prev)
		}
		prev = at
		msgs = append(msgs, ev.msg)
	}
	if snap, err := g.connect(aliceToken).GetSession(testCtx(t), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: sid})); err != nil {
		t.Fatal(err)
	} else if last := snap.Msg.GetSession().GetLastSeq(); prev.Seq > last || prev.Seq == 0 {
		t.Errorf("the last update's seq is %d, the session's last %d", prev.Seq, last)
	}
	if texts := texts(msgs); strings.Join(texts, "|") != "agent_message_chunk:Hello |agent_message_chunk:world" {
		t.Errorf("updates %q", texts)
	}
	if r, _ := got[len(got)-1].msg["result"].(map[string]any); r["stopReason"] != "end_turn" {
		t.Errorf("session/prompt answered %v", got[len(got)-1].msg)
	}
	stop()

	// Last-Event-ID resumes the session's stream after that event, without
	// loss or duplication.
	again, stop := c.stream(sid, http.Header{"Last-Event-ID": {got[0].id}})
	defer stop()
	for _, want := range got[1:] {
		if ev := next(t, again); ev.id != want.id || fmt.Sprint(ev.msg) != fmt.Sprint(want.msg) {
			t.Fatalf("resumed with event %s %v, want %s %v", ev.id, ev.msg, want.id, want.msg)
		}
	}
	c.post(sid, `{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"`+sid+`","prompt":[{"type":"text","text":"again"}]}}`, http.StatusAccepted)
	if ev := next(t, again); !prev.Before(mustPosition(t, ev.id)) {
		t.Errorf("the next event has id %s, want one after %s", ev.id, prev)
	}

	// DELETE ends the connection; the session lives on.
	res := c.do(http.MethodDelete, "", "", nil)
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Errorf("DELETE: %d, want 202", res.StatusCode)
	}
	c.post("", `{"jsonrpc":"2.0","id":4,"method":"session/list","params":{}}`, http.StatusNotFound)
	if got := scrape(t, g.base, `acp_gateway_acp_connections{transport="http"}`); got != "0" {
		// The bridge may take a moment to wind down.
		deadline := time.Now().Add(10 * time.Second)
		for got != "0" && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			got = scrape(t, g.base, `acp_gateway_acp_connections{transport="http"}`)
		}
		if got != "0" {
			t.Errorf("acp_gateway_acp_connections{transport=http} is %s after DELETE", got)
		}
	}
}

func TestStreamableHTTPRefusals(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	alice := &httpClient{t: t, url: g.base + "/acp", token: aliceToken}
	alice.initialize()
	alice.post("", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, t.TempDir()), http.StatusAccepted)
	conn, stop := alice.stream("", nil)
	defer stop()
	sid, _ := next(t, conn).msg["result"].(map[string]any)["sessionId"].(string)

	status := func(c *httpClient, method, session, body string, header http.Header) int {
		res := c.do(method, session, body, header)
		res.Body.Close()
		return res.StatusCode
	}
	bob := &httpClient{t: t, url: g.base + "/acp", token: bobToken, conn: alice.conn}
	anon := &httpClient{t: t, url: g.base + "/acp", conn: alice.conn}
	noConn := &httpClient{t: t, url: g.base + "/acp", token: aliceToken}
	bobsOwn := &httpClient{t: t, url: g.base + "/acp", token: bobToken}
	bobsOwn.initialize()
	sse := http.Header{"Accept": {"text/event-stream"}}
	for _, tc := range []struct {
		name                  string
		c                     *httpClient
		method, session, body string
		header                http.Header
		want                  int
	}{
		{"no token", anon, http.MethodPost, "", `{"jsonrpc":"2.0","id":5,"method":"session/list"}`, nil, http.StatusUnauthorized},
		{"another user's connection", bob, http.MethodPost, "", `{"jsonrpc":"2.0","id":5,"method":"session/list"}`, nil, http.StatusNotFound},
		{"another user's connection, SSE", bob, http.MethodGet, "", "", sse, http.StatusNotFound},
		{"another user's session", bobsOwn, http.MethodGet, sid, "", sse, http.StatusNotFound},
		{"no connection id", noConn, http.MethodPost, "", `{"jsonrpc":"2.0","id":5,"method":"session/list"}`, nil, http.StatusBadRequest},
		{"GET without a connection id", noConn, http.MethodGet, "", "", sse, http.StatusBadRequest},
		{"first message not initialize", noConn, http.MethodPost, "", `{"jsonrpc":"2.0","id":5,"method":"session/list"}`, nil, http.StatusBadRequest},
		{"not JSON", alice, http.MethodPost, "", `{"jsonrpc":"2.0","id":5,"method":"session/list"}`, http.Header{"Content-Type": {"text/plain"}}, http.StatusUnsupportedMediaType},
		{"batch", alice, http.MethodPost, "", `[{"jsonrpc":"2.0","id":5,"method":"session/list"}]`, nil, http.StatusNotImplemented},
		{"no Accept", alice, http.MethodGet, "", "", nil, http.StatusNotAcceptable},
		{"session message without its header", alice, http.MethodPost, "", `{"jsonrpc":"2.0","id":5,"method":"session/cancel","params":{"sessionId":"` + sid + `"}}`, nil, http.StatusBadRequest},
		{"too large", alice, http.MethodPost, "", `{"jsonrpc":"2.0","id":5,"method":"session/list","params":{"x":"` + strings.Repeat("x", 5<<20) + `"}}`, nil, http.StatusRequestEntityTooLarge},
		{"PUT", alice, http.MethodPut, "", "", nil, http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *tc.c
			c.t = t
			if got := status(&c, tc.method, tc.session, tc.body, tc.header); got != tc.want {
				t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
			}
		})
	}
}

// TestConnectionsAreBoundedPerUser: a user gets so many connections, of
// both kinds, and one more initialize or upgrade is refused until one
// ends.
func TestConnectionsAreBoundedPerUser(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	ws, _ := dial(t, g.ws+"/acp", bearer(aliceToken))
	var first *httpClient
	for i := range acpnet.DefaultMaxConnectionsPerUser - 1 {
		c := &httpClient{t: t, url: g.base + "/acp", token: aliceToken}
		c.initialize()
		if i == 0 {
			first = c
		}
	}
	c := &httpClient{t: t, url: g.base + "/acp", token: aliceToken}
	res := c.do(http.MethodPost, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`, nil)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("one connection too many: %d, want 429", res.StatusCode)
	}
	_, res, err := websocket.Dial(testCtx(t), g.ws+"/acp", bearer(aliceToken))
	if err == nil || res == nil || res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("one WebSocket too many: %v, %v; want 429", res, err)
	}
	_ = ws.c.Close(websocket.StatusNormalClosure, "")
	// The WebSocket's room comes back once it is gone.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		res := c.do(http.MethodPost, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`, nil)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no room for a connection after a WebSocket closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Bob is not held back by alice's.
	(&httpClient{t: t, url: g.base + "/acp", token: bobToken}).initialize()
	res = first.do(http.MethodDelete, "", "", nil)
	res.Body.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		res := c.do(http.MethodPost, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`, nil)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Error("no room for a connection after one was deleted")
}
