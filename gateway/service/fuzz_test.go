package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

func TestMain(m *testing.M) {
	agentsim.ServeIfCommanded()
	// Streams, pumps and the sessions behind them must end with each test.
	goleak.VerifyTestMain(m)
}

// procedure is one RPC the fuzzer calls.
type procedure struct {
	name   string
	stream bool
	// response is a new response message, to check a success decodes.
	response func() proto.Message
}

var procedures = []procedure{
	{"CreateSession", false, func() proto.Message { return &acpv2.CreateSessionResponse{} }},
	{"Prompt", true, func() proto.Message { return &acpv2.PromptResponse{} }},
	{"Watch", true, func() proto.Message { return &acpv2.WatchResponse{} }},
	{"Cancel", false, func() proto.Message { return &acpv2.CancelResponse{} }},
	{"RespondPermission", false, func() proto.Message { return &acpv2.RespondPermissionResponse{} }},
	{"GetSession", false, func() proto.Message { return &acpv2.GetSessionResponse{} }},
	{"ListSessions", false, func() proto.Message { return &acpv2.ListSessionsResponse{} }},
	{"CloseSession", false, func() proto.Message { return &acpv2.CloseSessionResponse{} }},
	{"SetMode", false, func() proto.Message { return &acpv2.SetModeResponse{} }},
	{"SetConfigOption", false, func() proto.Message { return &acpv2.SetConfigOptionResponse{} }},
	{"ListAgents", false, func() proto.Message { return &acpv2.ListAgentsResponse{} }},
	{"DeleteSession", false, func() proto.Message { return &acpv2.DeleteSessionResponse{} }},
	{"Logout", false, func() proto.Message { return &acpv2.LogoutResponse{} }},
	{"RespondElicitation", false, func() proto.Message { return &acpv2.RespondElicitationResponse{} }},
}

// Placeholders in a fuzzed body: the id of a live session, and a directory
// a session may be created in. In a protobuf body they are replaced only
// as the whole of a top-level field.
const (
	sidPlaceholder = "{{sid}}"
	cwdPlaceholder = "{{cwd}}"
)

// fuzzGateway is an in-process gateway with a live session for the fuzzed
// requests to aim at.
type fuzzGateway struct {
	base string
	http *http.Client
	mgr  *session.Manager
	c    acpv2connect.SessionServiceClient
	cwd  string
	live string // a session the fuzzer reaches through {{sid}}
	// history describes the last requests, for failures that depend on
	// what came before.
	history []string
}

func startFuzzGateway(f *testing.F) *fuzzGateway {
	f.Helper()
	script := func(s agentsim.Script) []string {
		cmd, err := agentsim.Command(s)
		if err != nil {
			f.Fatal(err)
		}
		return cmd
	}
	turn := agentsim.Turn{Steps: []agentsim.Step{{Update: json.RawMessage(
		`{"sessionUpdate":"tool_call","toolCallId":"c1","title":"t","status":"pending","rawInput":{"n":1e400}}`)}}}
	// The gateway serve runs, interceptors included: their answers to
	// bad requests are part of what is fuzzed.
	gw, err := app.New(context.Background(), app.Config{Heartbeat: time.Minute, Session: session.Options{
		Agents: map[string][]string{
			"sim":     script(agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{turn}}),
			"sim2":    script(agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{turn}}),
			"missing": {"/nonexistent/agent-binary"},
		},
		Env:               []string{"PATH=" + os.Getenv("PATH")},
		Store:             statestore.NewMemory(statestore.Options{MaxEndedSessions: 8}),
		Log:               slog.New(slog.DiscardHandler),
		PermissionTimeout: time.Second,
		AgentStartTimeout: 5 * time.Second,
		AgentStopGrace:    100 * time.Millisecond,
		IdleTimeout:       -1,
	}})
	if err != nil {
		f.Fatal(err)
	}
	g := &fuzzGateway{
		http: &http.Client{Transport: &http.Transport{}},
		mgr:  gw.Manager,
		cwd:  f.TempDir(),
	}
	f.Cleanup(g.http.CloseIdleConnections) // after the gateway's shutdown
	g.base, _ = testutil.Serve(f, gw.Server.Serve, gw.Shutdown)
	g.c = acpv2connect.NewSessionServiceClient(g.http, g.base)
	g.renew(f)
	return g
}

// renew replaces the live session when a fuzzed request closed it or lost
// its agent.
func (g *fuzzGateway) renew(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if g.live != "" {
		res, err := g.c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: g.live}))
		switch {
		case connect.CodeOf(err) == connect.CodeNotFound:
			// Closed, and pruned since by MaxEndedSessions as other
			// sessions closed after it.
		case err != nil:
			t.Fatalf("GetSession of the live session %s: %v\nafter these requests, oldest first:\n%s", g.live, err, strings.Join(g.history, "\n"))
		default:
			if st := res.Msg.GetSession().GetState(); st != "closed" && st != "agent_lost" {
				return
			}
			_, _ = g.c.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: g.live}))
		}
	}
	res, err := g.c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "sim", Cwd: g.cwd}))
	if err != nil {
		t.Fatalf("creating the live session: %v", err)
	}
	g.live = res.Msg.GetSessionId()
}

// expand replaces the placeholders in a JSON body.
func (g *fuzzGateway) expandJSON(body []byte) []byte {
	body = bytes.ReplaceAll(body, []byte(sidPlaceholder), []byte(g.live))
	return bytes.ReplaceAll(body, []byte(cwdPlaceholder), []byte(g.cwd))
}

// expandProto replaces top-level length-delimited fields that are exactly a
// placeholder; a body that does not parse is left alone.
func (g *fuzzGateway) expandProto(body []byte) []byte {
	var out []byte
	for b := body; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return body
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return body
		}
		field := b[:n+m]
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n:])
			switch string(v) {
			case sidPlaceholder:
				field = protowire.AppendString(protowire.AppendTag(nil, num, typ), g.live)
			case cwdPlaceholder:
				field = protowire.AppendString(protowire.AppendTag(nil, num, typ), g.cwd)
			}
		}
		out = append(out, field...)
		b = b[n+m:]
	}
	return out
}

// result is what the gateway answered.
type result struct {
	status  int
	code    string // Connect error code; "" for success
	message string
	msgs    [][]byte // a success's messages
}

// call sends body to procedure p and reads the answer; a stream is read to
// its end, except a live Watch, which is left after its opening message.
func (g *fuzzGateway) call(t *testing.T, p procedure, asProto, envelopeIt bool, body []byte) result {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ct := "application/json"
	if asProto {
		ct = "application/proto"
	}
	if p.stream {
		ct = strings.Replace(ct, "/", "/connect+", 1)
		if envelopeIt {
			body = testutil.Envelope(0, body)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base+"/acp.v2.SessionService/"+p.name, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	if !p.stream {
		req.Header.Set("Connect-Protocol-Version", "1")
	}
	res, err := g.http.Do(req)
	if err != nil {
		t.Fatalf("%s: no answer (did the handler panic?): %v", p.name, err)
	}
	defer res.Body.Close()
	r := result{status: res.StatusCode}
	if !p.stream {
		data, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", p.name, err)
		}
		if res.StatusCode == http.StatusOK {
			r.msgs = [][]byte{data}
			return r
		}
		var e struct{ Code, Message string }
		if err := json.Unmarshal(data, &e); err != nil || e.Code == "" {
			t.Fatalf("%s: status %d with a body that is no Connect error: %q", p.name, res.StatusCode, data)
		}
		r.code, r.message = e.Code, e.Message
		return r
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: a Connect stream answered HTTP status %d", p.name, res.StatusCode)
	}
	for {
		flags, data, err := testutil.ReadEnvelope(res.Body)
		if err != nil {
			t.Fatalf("%s: the stream broke off without its end message (did the handler panic or hang?): %v", p.name, err)
		}
		if flags&2 == 0 {
			r.msgs = append(r.msgs, data)
			if p.name == "Watch" {
				return r // a live watch does not end by itself
			}
			continue
		}
		var end struct {
			Error *struct{ Code, Message string }
		}
		if err := json.Unmarshal(data, &end); err != nil {
			t.Fatalf("%s: bad end message %q", p.name, data)
		}
		if end.Error != nil {
			r.code, r.message = end.Error.Code, end.Error.Message
			if r.code == "" {
				t.Fatalf("%s: an end message with an error without a code: %q", p.name, data)
			}
		}
		return r
	}
}

// legitimate5xx are the codes Connect maps to a 5xx status that a handler
// may rightly return.
var legitimate5xx = map[string]bool{
	connect.CodeUnavailable.String():      true,
	connect.CodeUnimplemented.String():    true,
	connect.CodeDeadlineExceeded.String(): true,
}

// FuzzRequests sends arbitrary bodies to every RPC of a real in-process
// gateway, as Connect JSON or protobuf. The gateway must answer each with
// success or a Connect error whose code says what was wrong: never
// internal, unknown or data_loss, never a 5xx status but for unavailable,
// unimplemented and deadline_exceeded, never a broken connection (a
// panicking handler) and never a hang.
func FuzzRequests(f *testing.F) {
	g := startFuzzGateway(f)
	addJSON := func(name, body string) {
		for i, p := range procedures {
			if p.name == name {
				f.Add(uint8(i), uint8(0), []byte(body))
				return
			}
		}
		f.Fatalf("no procedure %s", name)
	}
	addProto := func(name string, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		for i, p := range procedures {
			if p.name == name {
				f.Add(uint8(i), uint8(1), b)
				return
			}
		}
		f.Fatalf("no procedure %s", name)
	}
	text := func(s string) []*acpv2.ContentBlock {
		return []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: s}}}}
	}
	for _, s := range []struct{ name, body string }{
		{"CreateSession", `{"agent":"sim","cwd":"{{cwd}}"}`},
		{"CreateSession", `{"agent":"sim2","cwd":"{{cwd}}","authMethod":"x"}`},
		{"CreateSession", `{"agent":"missing","cwd":"{{cwd}}"}`},
		{"CreateSession", `{"agent":"nope","cwd":"{{cwd}}"}`},
		{"CreateSession", `{"agent":"sim","cwd":"relative"}`},
		{"CreateSession", `{"agent":"sim","cwd":"/nonexistent/dir"}`},
		{"CreateSession", `{"agent":"sim","cwd":"{{cwd}}/../.."}`},
		{"CreateSession", `{}`},
		{"Prompt", `{"sessionId":"{{sid}}","prompt":[{"text":{"text":"hi"}}]}`},
		{"Prompt", `{"sessionId":"{{sid}}","prompt":[{"image":{"data":"AAAA","mimeType":"image/png"}},{"resourceLink":{"uri":"file:///x","name":"x"}},{"unknown":{"type":"_x","n":[1,null,{}]}}]}`},
		{"Prompt", `{"sessionId":"{{sid}}","prompt":[{}]}`},
		{"Prompt", `{"sessionId":"{{sid}}"}`},
		{"Prompt", `{"sessionId":"s_unknown","prompt":[{"text":{"text":"hi"}}]}`},
		{"Watch", `{"sessionId":"{{sid}}"}`},
		{"Watch", `{"sessionId":"{{sid}}","afterSeq":"18446744073709551615"}`},
		{"Watch", `{"sessionId":"s_unknown","afterSeq":3}`},
		{"Watch", `{}`},
		{"Cancel", `{"sessionId":"{{sid}}"}`},
		{"Cancel", `{"sessionId":""}`},
		{"RespondPermission", `{"sessionId":"{{sid}}","requestId":"perm-1","optionId":"allow-once"}`},
		{"RespondPermission", `{"sessionId":"{{sid}}","requestId":"perm-1","cancelled":true}`},
		{"RespondPermission", `{"sessionId":"{{sid}}","requestId":"perm-1","optionId":"a","cancelled":true}`},
		{"RespondElicitation", `{"sessionId":"{{sid}}","requestId":"elicit-1","action":"accept","content":{"name":"a","n":[1,{"k":null}]}}`},
		{"RespondElicitation", `{"sessionId":"{{sid}}","requestId":"elicit-1","action":"maybe"}`},
		{"RespondElicitation", `{"sessionId":"{{sid}}","requestId":"","action":"decline"}`},
		{"GetSession", `{"sessionId":"{{sid}}"}`},
		{"GetSession", `{"sessionId":"{{sid}}","unknownField":[1]}`},
		{"GetSession", `{"sessionId":"` + strings.Repeat("s", 300) + `"}`},
		{"GetSession", `{"sessionId":5}`},
		{"GetSession", `{"sessionId":"s_\u0000"}`},
		{"GetSession", `{"sessionId":"a","sessionId":"b"}`},
		{"GetSession", `{`},
		{"GetSession", ``},
		{"ListSessions", `{}`},
		{"ListSessions", `[]`},
		{"CloseSession", `{"sessionId":"{{sid}}"}`},
		{"CloseSession", `{"sessionId":"s_unknown"}`},
		{"SetMode", `{"sessionId":"{{sid}}","modeId":"fast"}`},
		{"SetMode", `{"sessionId":"{{sid}}"}`},
		{"SetConfigOption", `{"sessionId":"{{sid}}","configId":"c","valueId":"v"}`},
		{"SetConfigOption", `{"sessionId":"{{sid}}","configId":"c","boolean":true}`},
		{"SetConfigOption", `{"sessionId":"{{sid}}","configId":"c"}`},
		{"SetConfigOption", `{"sessionId":"{{sid}}","configId":"c","valueId":"v","boolean":false}`},
	} {
		addJSON(s.name, s.body)
	}
	numbers := &structpb.Struct{Fields: map[string]*structpb.Value{"type": structpb.NewStringValue("_n"), "x": structpb.NewNumberValue(1e300), "n": structpb.NewNullValue()}}
	for _, s := range []struct {
		name string
		m    proto.Message
	}{
		{"CreateSession", &acpv2.CreateSessionRequest{Agent: "sim", Cwd: cwdPlaceholder}},
		{"CreateSession", &acpv2.CreateSessionRequest{Agent: "missing", Cwd: cwdPlaceholder}},
		{"Prompt", &acpv2.PromptRequest{SessionId: sidPlaceholder, Prompt: text("hi")}},
		{"Prompt", &acpv2.PromptRequest{SessionId: sidPlaceholder, Prompt: []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Unknown{Unknown: numbers}}}}},
		{"Prompt", &acpv2.PromptRequest{SessionId: sidPlaceholder, Prompt: []*acpv2.ContentBlock{{}}}},
		{"Watch", &acpv2.WatchRequest{SessionId: sidPlaceholder, AfterSeq: 1}},
		{"Watch", &acpv2.WatchRequest{SessionId: "s_unknown"}},
		{"Cancel", &acpv2.CancelRequest{SessionId: sidPlaceholder}},
		{"RespondPermission", &acpv2.RespondPermissionRequest{SessionId: sidPlaceholder, RequestId: "perm-2", OptionId: "allow-once"}},
		{"RespondElicitation", &acpv2.RespondElicitationRequest{SessionId: sidPlaceholder, RequestId: "elicit-2", Action: "accept", Content: numbers}},
		{"GetSession", &acpv2.GetSessionRequest{SessionId: sidPlaceholder}},
		{"GetSession", &acpv2.GetSessionRequest{SessionId: "s_unknown"}},
		{"ListSessions", &acpv2.ListSessionsRequest{}},
		{"CloseSession", &acpv2.CloseSessionRequest{SessionId: sidPlaceholder}},
		{"SetMode", &acpv2.SetModeRequest{SessionId: sidPlaceholder, ModeId: "m"}},
		{"SetConfigOption", &acpv2.SetConfigOptionRequest{SessionId: sidPlaceholder, ConfigId: "c", Value: &acpv2.SetConfigOptionRequest_Boolean{Boolean: true}}},
	} {
		addProto(s.name, s.m)
	}
	// Invalid UTF-8 in a string field, which Go's protobuf refuses.
	f.Add(uint8(5), uint8(1), protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "s_\xff"))
	// A stream's body without its envelope.
	f.Add(uint8(2), uint8(2), []byte(`{"sessionId":"{{sid}}"}`))

	f.Fuzz(func(t *testing.T, proc, mode uint8, body []byte) {
		p := procedures[int(proc)%len(procedures)]
		asProto, raw := mode&1 != 0, mode&2 != 0
		if asProto {
			body = g.expandProto(body)
		} else {
			body = g.expandJSON(body)
		}
		r := g.call(t, p, asProto, !raw, body)
		g.history = append(g.history, fmt.Sprintf("%s proto=%v %q -> %s %s", p.name, asProto, body, r.code, r.message))
		if len(g.history) > 20 {
			g.history = g.history[1:]
		}
		switch r.code {
		case "":
			// A success's messages are what the method returns.
			for _, data := range r.msgs {
				m := p.response()
				var err error
				switch {
				case asProto:
					err = proto.Unmarshal(data, m)
				default:
					err = protojson.Unmarshal(data, m)
				}
				if err != nil {
					t.Fatalf("%s answered a message that does not decode: %v\n%q", p.name, err, data)
				}
				if cs, ok := m.(*acpv2.CreateSessionResponse); ok {
					// Bound the agents running: close what the fuzzer made.
					if _, err := g.c.CloseSession(context.Background(), connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: cs.GetSessionId()})); err != nil {
						t.Fatalf("closing a fuzzed session: %v", err)
					}
				}
			}
		case connect.CodeInternal.String(), connect.CodeUnknown.String(), connect.CodeDataLoss.String():
			t.Fatalf("%s answered %s (%s): a request must get a code that says what is wrong", p.name, r.code, r.message)
		default:
			if _, err := connectCode(r.code); err != nil {
				t.Fatalf("%s answered code %q: %v", p.name, r.code, err)
			}
			if r.message == "" {
				t.Fatalf("%s answered %s without a message", p.name, r.code)
			}
			if r.status >= 500 && !legitimate5xx[r.code] {
				t.Fatalf("%s answered status %d with %s (%s)", p.name, r.status, r.code, r.message)
			}
		}
		g.renew(t)
	})
}

func connectCode(s string) (connect.Code, error) {
	var c connect.Code
	if err := c.UnmarshalText([]byte(s)); err != nil {
		return 0, err
	}
	if c == 0 {
		return 0, errors.New("not an error code")
	}
	return c, nil
}
