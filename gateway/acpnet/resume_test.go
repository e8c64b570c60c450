package acpnet_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
)

// initializeV2 opens c's connection with ACP v2.
func (c *httpClient) initializeV2() {
	c.t.Helper()
	c.initializeV2With(`{}`)
}

// initializeV2With is initializeV2 with the client's capabilities caps
// (JSON).
func (c *httpClient) initializeV2With(caps string) {
	c.t.Helper()
	res := c.do(http.MethodPost, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":2,"capabilities":`+caps+`}}`, nil)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if c.conn = res.Header.Get("Acp-Connection-Id"); res.StatusCode != http.StatusOK || c.conn == "" {
		c.t.Fatalf("initialize: %d", res.StatusCode)
	}
}

// updateKind is the sessionUpdate of a session/update message (and its
// state, for a state_update), or "" for another message.
func updateKind(msg map[string]any) string {
	if msg["method"] != "session/update" {
		return ""
	}
	u, _ := msg["params"].(map[string]any)["update"].(map[string]any)
	kind, _ := u["sessionUpdate"].(string)
	if state, ok := u["state"].(string); ok {
		kind += ":" + state
	}
	return kind
}

// untilIdle reads events up to the idle state_update of a turn's end.
func untilIdle(t *testing.T, events <-chan sseEvent) []sseEvent {
	t.Helper()
	var out []sseEvent
	for {
		ev := next(t, events)
		out = append(out, ev)
		if updateKind(ev.msg) == "state_update:idle" {
			return out
		}
	}
}

// madeFromEvents returns the messages of evs made from the session's
// events (whose ids are positions, not "POSITION:N") after position
// after, as id and update.
func madeFromEvents(t *testing.T, evs []sseEvent, after bridge.Position) []string {
	t.Helper()
	var out []string
	for _, ev := range evs {
		if ev.msg["method"] != "session/update" {
			continue
		}
		if at := mustPosition(t, ev.id); after.Before(at) {
			u, _ := json.Marshal(ev.msg["params"])
			out = append(out, ev.id+" "+string(u))
		}
	}
	return out
}

// TestLastEventIDResumesOnAnotherConnection: a session's SSE stream,
// dropped mid-turn, is taken up on a new connection with Last-Event-ID:
// the new connection gets what came after that event once, from the
// session's log and then live, as a connection that never dropped got it;
// a permission request the client was asked on the dropped connection and
// had not answered is asked again, under an id of its own, and answering
// it there ends the turn.
func TestLastEventIDResumesOnAnotherConnection(t *testing.T) {
	t.Parallel()
	for dropAfter, wantKinds := range map[string]string{
		// The request comes after the drop: it is news on the new
		// connection.
		"tool_call_update": "[state_update:requires_action state_update:running tool_call_update state_update:idle]",
		// The client was asked and did not answer: asked again.
		"session/request_permission": "[state_update:running tool_call_update state_update:idle]",
	} {
		t.Run(dropAfter, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, app.Config{})
			url := g.base + "/acp/perm"
			a := &httpClient{t: t, url: url, token: aliceToken}
			a.initializeV2()
			connA, stopConnA := a.stream("", nil)
			defer stopConnA()
			a.post("", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, t.TempDir()), http.StatusAccepted)
			sid, _ := next(t, connA).msg["result"].(map[string]any)["sessionId"].(string)

			// ref follows the session throughout, as a client whose stream
			// never dropped.
			ref := &httpClient{t: t, url: url, token: aliceToken}
			ref.initializeV2()
			refEvents, stopRef := ref.stream(sid, nil)
			defer stopRef()
			ref.post(sid, `{"jsonrpc":"2.0","id":1,"method":"session/resume","params":{"sessionId":"`+sid+`","cwd":"/","mcpServers":[]}}`, http.StatusAccepted)
			until(t, refEvents, 1)

			eventsA, dropA := a.stream(sid, nil)
			a.post(sid, `{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"`+sid+`","prompt":[{"type":"text","text":"edit"}]}}`, http.StatusAccepted)
			var last string
			for last == "" {
				ev := next(t, eventsA)
				if updateKind(ev.msg) == dropAfter || ev.msg["method"] == dropAfter {
					last = ev.id
				}
			}
			dropA()
			res := a.do(http.MethodDelete, "", "", nil) // and the connection is gone
			res.Body.Close()

			b := &httpClient{t: t, url: url, token: aliceToken}
			b.initializeV2()
			eventsB, stopB := b.stream(sid, http.Header{"Last-Event-ID": {last}})
			defer stopB()
			var gotB []sseEvent
			var ask map[string]any
			for ask == nil {
				ev := next(t, eventsB)
				gotB = append(gotB, ev)
				if ev.msg["method"] == "session/request_permission" {
					ask = ev.msg
					if ev.id == last {
						// A GET with Last-Event-ID on this connection
						// would take it for the message the client had.
						t.Errorf("the request asked again has id %q, the id of the client's last message", ev.id)
					}
				}
			}
			b.post(sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"outcome":{"outcome":"selected","optionId":"allow-once"}}}`, ask["id"]), http.StatusAccepted)
			gotB = append(gotB, untilIdle(t, eventsB)...)
			gotRef := untilIdle(t, refEvents)

			from := mustPosition(t, last)
			want := madeFromEvents(t, gotRef, from)
			if got := madeFromEvents(t, gotB, bridge.Position{}); !reflect.DeepEqual(got, want) {
				t.Errorf("the new connection got\n%q\nafter %s; the connection that never dropped\n%q", got, last, want)
			}
			var kinds []string
			for _, ev := range gotB {
				if k := updateKind(ev.msg); k != "" {
					kinds = append(kinds, k)
				}
			}
			if fmt.Sprint(kinds) != wantKinds {
				t.Errorf("the new connection's updates %q, want %s", kinds, wantKinds)
			}
			asks := 0
			for _, ev := range gotB {
				if ev.msg["method"] == "session/request_permission" {
					asks++
				}
			}
			if asks != 1 {
				t.Errorf("the new connection was asked %d times, want once", asks)
			}
		})
	}
}

// TestLastEventIDRefusals: a Last-Event-ID that names no place in the
// session's log, or one past its end, or another user's session, is
// refused; a connection's own stream that no longer holds the id is 409.
func TestLastEventIDRefusals(t *testing.T) {
	t.Parallel()
	g := startGateway(t, app.Config{})
	a := &httpClient{t: t, url: g.base + "/acp", token: aliceToken}
	a.initialize()
	conn, stop := a.stream("", nil)
	defer stop()
	a.post("", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, t.TempDir()), http.StatusAccepted)
	sid, _ := next(t, conn).msg["result"].(map[string]any)["sessionId"].(string)
	bob := &httpClient{t: t, url: g.base + "/acp", token: bobToken}
	bob.initialize()
	status := func(c *httpClient, lastID string) int {
		res := c.do(http.MethodGet, sid, "", http.Header{"Accept": {"text/event-stream"}, "Last-Event-ID": {lastID}})
		res.Body.Close()
		return res.StatusCode
	}
	fresh := func() *httpClient {
		c := &httpClient{t: t, url: g.base + "/acp", token: aliceToken}
		c.initialize()
		return c
	}
	for _, tc := range []struct {
		name   string
		c      *httpClient
		lastID string
		want   int
	}{
		{"not a position", fresh(), "x1", http.StatusBadRequest},
		{"past the log", fresh(), "999999", http.StatusConflict},
		{"another user's session", bob, "0", http.StatusNotFound},
		{"not in this connection's stream", a, "999", http.StatusConflict},
	} {
		if got := status(tc.c, tc.lastID); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// An elicitation a client was asked and did not answer is asked again of
// the connection that takes the session up with Last-Event-ID, as a
// permission request is, and its answer there ends the turn.
func TestLastEventIDAsksAWaitingElicitationAgain(t *testing.T) {
	t.Parallel()
	const caps = `{"elicitation":{"form":{}}}`
	g := startGateway(t, app.Config{})
	url := g.base + "/acp/who"
	a := &httpClient{t: t, url: url, token: aliceToken}
	a.initializeV2With(caps)
	connA, stopConnA := a.stream("", nil)
	defer stopConnA()
	a.post("", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, t.TempDir()), http.StatusAccepted)
	sid, _ := next(t, connA).msg["result"].(map[string]any)["sessionId"].(string)

	eventsA, dropA := a.stream(sid, nil)
	a.post(sid, `{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"`+sid+`","prompt":[{"type":"text","text":"who"}]}}`, http.StatusAccepted)
	var last string
	for last == "" {
		if ev := next(t, eventsA); ev.msg["method"] == "elicitation/create" {
			last = ev.id
		}
	}
	dropA()
	res := a.do(http.MethodDelete, "", "", nil)
	res.Body.Close()

	b := &httpClient{t: t, url: url, token: aliceToken}
	b.initializeV2With(caps)
	eventsB, stopB := b.stream(sid, http.Header{"Last-Event-ID": {last}})
	defer stopB()
	var ask map[string]any
	for ask == nil {
		if ev := next(t, eventsB); ev.msg["method"] == "elicitation/create" {
			ask = ev.msg
		}
	}
	b.post(sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"action":"accept","content":{"name":"Ada"}}}`, ask["id"]), http.StatusAccepted)
	untilIdle(t, eventsB)
}
