package session

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agent"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/eventjson"
	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

// storedSession returns session s1 of a manager with opts over a new
// memory store (unless opts names one), restored from the store with no
// agent, as speaking ACP version v.
func storedSession(t *testing.T, opts Options, v acpjson.Version) (statestore.Store, *Session) {
	t.Helper()
	if opts.Store == nil {
		opts.Store = statestore.NewMemory(statestore.Options{})
	}
	opts.IdleTimeout = -1
	rec := &statestore.Session{ID: "s1", Agent: "a", Cwd: "/", State: statestore.StateAgentLost, CreatedAt: time.Now(), ProtocolVersion: int(v)}
	if err := opts.Store.CreateSession(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	m := NewManager(opts)
	t.Cleanup(m.Close)
	s, err := m.Get(context.Background(), "", "s1")
	if err != nil {
		t.Fatal(err)
	}
	return opts.Store, s
}

// agentUpdate decodes line as the agent's read loop does: in one pass
// when it can, else the update cut out by the JSON-RPC decoder, kept
// whole when it does not decode. ok is false for a line that ends the
// agent (not JSON).
func agentUpdate(update []byte, v acpjson.Version) (agent.Update, bool) {
	line := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":` + string(update) + `}}`)
	if n, ok := acpjson.DecodeNotification(line, v); ok {
		return agent.Update{AgentSessionID: n.SessionID, Update: n.Update, Err: n.Err}, true
	}
	u, err := acpjson.DecodeUpdate(update, v)
	if err != nil {
		u = acpjson.KeepUnknown(update)
	}
	return agent.Update{Update: u, Err: err}, u != nil
}

// checkReadBack checks that everything session s1 of st holds decodes
// again, and does in the responses that carry it to clients, of either
// encoding, within storetest.MaxReadDepth.
func checkReadBack(t *testing.T, st statestore.Store, s *Session) {
	t.Helper()
	ctx := context.Background()
	events, err := decoded(t)(st.Events(ctx, "s1", 0, 0))
	if err != nil {
		t.Fatalf("the session's events do not read back: %v", err)
	}
	calls, _, err := st.ToolCalls(ctx, "s1")
	if err != nil {
		t.Fatalf("the session's tool calls do not read back: %v", err)
	}
	responses := []proto.Message{
		&acpv2.GetSessionResponse{Session: s.Snapshot()},
		&acpv2.GetSessionResponse{Session: &acpv2.SessionSnapshot{ToolCalls: calls}},
	}
	for _, ev := range events {
		responses = append(responses, &acpv2.WatchResponse{Event: ev})
	}
	for _, r := range responses {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		// Not deeper than MaxReadDepth, far under protobuf's default limit.
		within := proto.UnmarshalOptions{RecursionLimit: storetest.MaxReadDepth}
		if err := within.Unmarshal(b, r.ProtoReflect().New().Interface()); err != nil {
			t.Fatalf("a response does not decode within %d levels: %v", storetest.MaxReadDepth, err)
		}
		js, err := eventjson.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := protojson.Unmarshal(js, r.ProtoReflect().New().Interface()); err != nil {
			t.Fatalf("a response does not decode from JSON: %v", err)
		}
	}
}

// askAndCancel makes params the agent's permission request, and when
// the session takes it, cancels it.
func askAndCancel(s *Session, params []byte) {
	if _, _, err := s.RequestPermission(params); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.asks {
		s.resolveLocked(id, cancelled(), AnsweredByCancel)
	}
}

// readBackSeeds are updates, valid and not, some as deep as the decoders
// take and some deeper.
func readBackSeeds() []string {
	deep := func(levels int) string { return strings.Repeat(`{"k":`, levels) + "1" + strings.Repeat("}", levels) }
	return []string{
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","status":"completed","rawInput":` + deep(acpjson.MaxDepth-1) + `}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","rawInput":` + deep(6000) + `}`,
		`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"content","content":{"type":"text","text":"x","_meta":` + deep(acpjson.MaxDepth-3) + `}}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"},"_meta":` + deep(9900) + `}`,
		`{"sessionUpdate":"_vendor","x":` + deep(acpjson.MaxDepth) + `}`,
		`[` + deep(200) + `]`,
		`{"toolCall":{"toolCallId":"c","rawInput":` + deep(acpjson.MaxDepth-2) + `},"options":[{"optionId":"a","name":"A","kind":"allow_once"}]}`,
		`{"toolCall":{"toolCallId":"c","rawInput":` + deep(3000) + `},"options":[]}`,
	}
}

// FuzzStoredEventsReadBack: whatever an agent sends, as an update or as a
// permission request, the session stores only what decodes again.
func FuzzStoredEventsReadBack(f *testing.F) {
	for _, s := range readBackSeeds() {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, ver uint8) {
		v := acpjson.Version(1 + ver%2)
		st, s := storedSession(t, Options{}, v)
		if up, ok := agentUpdate(data, v); ok {
			update(t, s, []agent.Update{up})
		}
		askAndCancel(s, data)
		checkReadBack(t, st, s)
	})
}

// The seeds read back: JSON as deep as the decoders take is stored as it
// is, and deeper JSON is kept within the cap.
func TestStoredEventsReadBack(t *testing.T) {
	t.Parallel()
	for _, seed := range readBackSeeds() {
		for _, v := range []acpjson.Version{acpjson.V1, acpjson.V2} {
			st, s := storedSession(t, Options{}, v)
			up, ok := agentUpdate([]byte(seed), v)
			if !ok {
				t.Fatalf("%.60s: not an update", seed)
			}
			update(t, s, []agent.Update{up})
			askAndCancel(s, []byte(seed))
			checkReadBack(t, st, s)
		}
	}
}
