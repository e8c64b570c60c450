package bridge_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// spyClient is the gateway's client as a bridge uses it, counting the
// answers to permission requests the bridge relays and, with gate set,
// holding the first GetSession until gate closes (entered is closed when
// it comes).
type spyClient struct {
	acpv2connect.SessionServiceClient
	responds atomic.Int32

	gate, entered chan struct{}
	once          sync.Once
}

func (c *spyClient) RespondPermission(ctx context.Context, req *connect.Request[acpv2.RespondPermissionRequest]) (*connect.Response[acpv2.RespondPermissionResponse], error) {
	c.responds.Add(1)
	return c.SessionServiceClient.RespondPermission(ctx, req)
}

func (c *spyClient) GetSession(ctx context.Context, req *connect.Request[acpv2.GetSessionRequest]) (*connect.Response[acpv2.GetSessionResponse], error) {
	first := false
	c.once.Do(func() { first = true })
	if first && c.gate != nil {
		close(c.entered)
		<-c.gate
	}
	return c.SessionServiceClient.GetSession(ctx, req)
}

// TestAnEditorThatGoesLeavesItsPermissionRequestPending: an editor that
// goes while asked for permission has given no answer, and the bridge
// relays none (no "cancelled" in its name): the request waits for the
// session's other clients, or for the same client on a new connection
// (/acp's Last-Event-ID asks it again there).
func TestAnEditorThatGoesLeavesItsPermissionRequestPending(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": permissionScript})
	spy := &spyClient{SessionServiceClient: g.client}
	opts := bridgeOptions(g, "sim")
	opts.Client, opts.KeepSessions = spy, true
	m := newChanMessages()
	served := make(chan error, 1)
	go func() { served <- bridge.ServeMessages(context.Background(), m, opts) }()

	m.in <- []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	m.next(t)
	m.in <- []byte(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"` + t.TempDir() + `","mcpServers":[]}}`)
	sid, _ := m.next(t)["result"].(map[string]any)["sessionId"].(string)
	m.in <- []byte(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"edit b.go"}]}}`)
	for m.next(t)["method"] != "session/request_permission" {
	}
	_ = m.Close() // the editor goes without answering
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeMessages: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ServeMessages did not return after its transport closed")
	}
	if n := spy.responds.Load(); n != 0 {
		t.Errorf("the bridge answered the permission request %d times for an editor that went", n)
	}
	if n := len(g.snapshot(t, sid).GetPendingPermissions()); n != 1 {
		t.Errorf("%d pending permission requests after the editor went, want the one it was asked", n)
	}
}

// positionedMessages is a chanMessages whose transport numbers session
// messages by the log (bridge.Positioned), as /acp's SSE streams do; it
// hands over the bridge's Resumer.
type positionedMessages struct {
	*chanMessages
	resumer chan bridge.Resumer
}

func (m *positionedMessages) WriteAt(_ string, _ bridge.Position, msg []byte) error {
	return m.Write(msg)
}

func (m *positionedMessages) Reached(string, bridge.Position) {}

func (m *positionedMessages) Bind(r bridge.Resumer) { m.resumer <- r }

// TestConcurrentResumesAttachOnce: of two Resumes of one session on one
// connection at once, the one that comes while the other checks the
// session is the user's finds the session attached, rather than attaching
// it a second time (and asking its pending requests twice).
func TestConcurrentResumesAttachOnce(t *testing.T) {
	t.Parallel()
	g := startGateway(t, map[string]agentsim.Script{"sim": turnScript})
	ctx := testCtx(t)
	created, err := g.client.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim", Cwd: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	sid := created.Msg.GetSessionId()
	spy := &spyClient{SessionServiceClient: g.client, gate: make(chan struct{}), entered: make(chan struct{})}
	opts := bridgeOptions(g, "sim")
	opts.Client, opts.Follow, opts.KeepSessions = spy, true, true
	m := &positionedMessages{chanMessages: newChanMessages(), resumer: make(chan bridge.Resumer, 1)}
	served := make(chan error, 1)
	go func() { served <- bridge.ServeMessages(context.Background(), m, opts) }()
	defer func() {
		_ = m.Close()
		if err := <-served; err != nil {
			t.Errorf("ServeMessages: %v", err)
		}
	}()
	r := <-m.resumer

	first := make(chan error, 1)
	go func() { first <- r.Resume(ctx, sid, bridge.Position{}) }()
	<-spy.entered // the first Resume checks the session
	second := r.Resume(ctx, sid, bridge.Position{})
	close(spy.gate)
	if !errors.Is(second, bridge.ErrAttached) {
		t.Errorf("the second Resume while the first checked the session: %v, want ErrAttached", second)
	}
	if err := <-first; err != nil {
		t.Errorf("the first Resume: %v", err)
	}
}
