package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// acpHTTP is a raw client of /acp's Streamable HTTP profile.
type acpHTTP struct {
	t    *testing.T
	url  string
	conn string
}

func (c *acpHTTP) do(ctx context.Context, method, session, body string, header http.Header) *http.Response {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.conn != "" {
		req.Header.Set("Acp-Connection-Id", c.conn)
	}
	if session != "" {
		req.Header.Set("Acp-Session-Id", session)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}

func (c *acpHTTP) post(session, msg string) {
	c.t.Helper()
	res := c.do(context.Background(), http.MethodPost, session, msg, nil)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if want := http.StatusAccepted; c.conn == "" && res.StatusCode == http.StatusOK {
		c.conn = res.Header.Get("Acp-Connection-Id")
	} else if res.StatusCode != want {
		c.t.Fatalf("POST %s: %d %s", msg, res.StatusCode, b)
	}
}

type acpEvent struct {
	id  string
	msg map[string]any
}

// stream opens session's SSE stream; drop ends it.
func (c *acpHTTP) stream(session, lastID string) (events <-chan acpEvent, drop func()) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := http.Header{"Accept": {"text/event-stream"}}
	if lastID != "" {
		h.Set("Last-Event-ID", lastID)
	}
	res := c.do(ctx, http.MethodGet, session, "", h)
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		c.t.Fatalf("GET %s (Last-Event-ID %q): %d %s", session, lastID, res.StatusCode, b)
	}
	raw := make(chan testutil.SSEMessage, 100)
	ch := make(chan acpEvent, 100)
	done := make(chan struct{})
	go testutil.ReadSSE(res.Body, raw)
	go func() {
		defer close(done)
		defer close(ch)
		for m := range raw {
			ch <- acpEvent{id: m.ID, msg: m.Msg}
		}
	}()
	drop = func() {
		cancel()
		res.Body.Close()
		for range ch {
		}
		<-done
	}
	c.t.Cleanup(drop)
	return ch, drop
}

func nextACP(t *testing.T, events <-chan acpEvent) acpEvent {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("the SSE stream ended")
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no SSE event")
	}
	return acpEvent{}
}

// TestACPStreamResumesOnAnotherReplica: an /acp client whose session stream
// and connection dropped mid-turn, on replica A, takes the session's
// stream up on replica B with Last-Event-ID alone: it gets the events that
// followed, each once, named by their seqs in the shared log, is asked the
// permission it had not answered again, and its answer ends the turn that
// A runs.
func TestACPStreamResumesOnAnotherReplica(t *testing.T) {
	t.Parallel()
	r := newSharedRedis(t)
	secret := newReplicaSecret(t)
	withACP := func(c *app.Config) { c.ACP = true }
	a, b := startReplica(t, r, secret, withACP), startReplica(t, r, secret, withACP)
	id := createAs(t, a.gateway, aliceToken)

	onA := &acpHTTP{t: t, url: a.base + "/acp/perm"}
	onA.post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":2}}`)
	eventsA, dropA := onA.stream(id, "")
	onA.post(id, `{"jsonrpc":"2.0","id":1,"method":"session/resume","params":{"sessionId":"`+id+`","cwd":"/","mcpServers":[]}}`)
	onA.post(id, `{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"`+id+`","prompt":[{"type":"text","text":"edit"}]}}`)
	var last string
	for last == "" {
		if ev := nextACP(t, eventsA); ev.msg["method"] == "session/request_permission" {
			last = ev.id
		}
	}
	dropA()
	res := onA.do(context.Background(), http.MethodDelete, "", "", nil)
	res.Body.Close()

	onB := &acpHTTP{t: t, url: b.base + "/acp/perm"}
	onB.post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":2}}`)
	eventsB, _ := onB.stream(id, last)
	ask := nextACP(t, eventsB)
	if ask.msg["method"] != "session/request_permission" {
		t.Fatalf("the stream on B began with %s %v, want the permission request asked again", ask.id, ask.msg)
	}
	onB.post(id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"outcome":{"outcome":"selected","optionId":"allow-once"}}}`, ask.msg["id"]))
	var ids []string
	for {
		ev := nextACP(t, eventsB)
		if ev.msg["method"] != "session/update" {
			continue
		}
		if _, err := bridge.ParsePosition(ev.id); err != nil || strings.Contains(ev.id, ":") {
			t.Fatalf("update %v has id %q, want a seq", ev.msg, ev.id)
		}
		ids = append(ids, ev.id)
		if u := ev.msg["params"].(map[string]any)["update"].(map[string]any); u["state"] == "idle" {
			break
		}
	}
	// The ids are the seqs of what followed the permission request in the
	// log: its resolution, the tool call, the turn's end.
	at, _ := bridge.ParsePosition(last)
	var want []string
	lastSeq := snapshotAs(t, a.gateway, aliceToken, id).GetLastSeq()
	for _, ev := range watchAll(t, a.clientsAs(t, aliceToken)["connect+json"], id, at.Seq, int(lastSeq-at.Seq)) {
		switch ev.GetEvent().(type) {
		case *acpv2.SessionEvent_PermissionResolved, *acpv2.SessionEvent_ToolCallUpdate, *acpv2.SessionEvent_TurnEnded:
			want = append(want, fmt.Sprint(ev.GetSeq()))
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("the updates on B have ids %q, want the seqs %q", ids, want)
	}
}
