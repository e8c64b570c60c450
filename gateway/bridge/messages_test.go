package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
)

// chanMessages is bridge.Messages over channels: what a network transport
// (a WebSocket's frames) gives the bridge.
type chanMessages struct {
	in   chan []byte // nil message: a message too large
	out  chan []byte
	done chan struct{}
	once sync.Once
}

func newChanMessages() *chanMessages {
	return &chanMessages{in: make(chan []byte, 16), out: make(chan []byte, 1000), done: make(chan struct{})}
}

func (m *chanMessages) Read() ([]byte, error) {
	select {
	case msg := <-m.in:
		if msg == nil {
			return nil, fmt.Errorf("%w: over the test's limit", bridge.ErrTooLarge)
		}
		return msg, nil
	case <-m.done:
		return nil, io.EOF
	}
}

func (m *chanMessages) Write(msg []byte) error {
	select {
	case <-m.done:
		return io.ErrClosedPipe
	case m.out <- msg:
		return nil
	}
}

func (m *chanMessages) Close() error {
	m.once.Do(func() { close(m.done) })
	return nil
}

// next returns the bridge's next message.
func (m *chanMessages) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case b := <-m.out:
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("the bridge sent %q: %v", b, err)
		}
		return v
	case <-time.After(15 * time.Second):
		t.Fatal("timed out waiting for the bridge")
	}
	return nil
}

// serveMessages runs bridge.ServeMessages on a chanMessages until the test
// ends.
func serveMessages(t *testing.T, opts bridge.Options) *chanMessages {
	t.Helper()
	m := newChanMessages()
	served := make(chan error, 1)
	go func() { served <- bridge.ServeMessages(context.Background(), m, opts) }()
	t.Cleanup(func() {
		_ = m.Close()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("ServeMessages: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("ServeMessages did not return after its transport closed")
		}
	})
	return m
}

// TestServeMessagesSpeaksACPOverAnyTransport: the mapping stdio uses serves
// whole messages from any transport; a message the transport skipped for
// its size is refused and the connection goes on; and with ChooseAgent the
// client picks a session's agent in _meta.
func TestServeMessagesSpeaksACPOverAnyTransport(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript, "other": turnScript})
	opts := bridgeOptions(g, "sim")
	opts.ChooseAgent = true
	m := serveMessages(t, opts)

	m.in <- nil
	if e := m.next(t); e["id"] != nil || e["error"].(map[string]any)["code"] != float64(-32600) {
		t.Fatalf("a message too large got %v, want an invalid request with a null id", e)
	}
	m.in <- []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	if res, _ := m.next(t)["result"].(map[string]any); res["protocolVersion"] != float64(1) {
		t.Fatalf("initialize answered %v", res)
	}
	cwd := t.TempDir()
	m.in <- []byte(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"` + cwd + `","mcpServers":[],"_meta":{"acpGateway":{"agent":"other"}}}}`)
	created := m.next(t)
	sid, _ := created["result"].(map[string]any)["sessionId"].(string)
	if sid == "" {
		t.Fatalf("session/new answered %v", created)
	}
	if agent := g.snapshot(t, sid).GetAgent(); agent != "other" {
		t.Errorf("the session runs agent %q, want the one _meta chose, other", agent)
	}
	m.in <- []byte(`{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"` + cwd + `","mcpServers":[]}}`)
	created = m.next(t)
	sid, _ = created["result"].(map[string]any)["sessionId"].(string)
	if agent := g.snapshot(t, sid).GetAgent(); agent != "sim" {
		t.Errorf("without _meta the session runs agent %q, want the default, sim", agent)
	}
}

// TestAgentInMetaIsRefusedWithoutChooseAgent: the stdio bridge runs the
// agent it was started for.
func TestAgentInMetaIsRefusedWithoutChooseAgent(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript, "other": turnScript})
	r := startRawEditor(t, bridgeOptions(g, "sim"))
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	r.next()
	r.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"` + t.TempDir() + `","mcpServers":[],"_meta":{"acpGateway":{"agent":"other"}}}}`)
	if e := r.next(); e["id"] != float64(2) || e["error"] == nil || e["error"].(map[string]any)["code"] != float64(-32602) {
		t.Errorf("session/new naming another agent answered %v, want invalid params", e)
	}
}
