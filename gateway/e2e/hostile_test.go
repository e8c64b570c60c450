package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/server"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// This file feeds the gateway hostile input, from clients and from agents,
// and checks that each gets a clear error and that nothing else is lost.

// rawReply is the answer to a hand-built Connect request.
type rawReply struct {
	status  int
	code    string // the Connect error code; "" on success
	message string
	body    []byte   // a unary call's answer
	msgs    [][]byte // a stream's messages before its end
}

// rawUnary POSTs body to a unary method with the given Content-Type and
// decodes a Connect error.
func (g *gateway) rawUnary(t *testing.T, method, contentType string, body []byte) rawReply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.base+"/acp.v2.SessionService/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Connect-Protocol-Version", "1")
	t.Cleanup(hostileHTTP.CloseIdleConnections)
	res, err := hostileHTTP.Do(req)
	if err != nil {
		t.Fatalf("%s: %v (did the gateway crash?)", method, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := rawReply{status: res.StatusCode, body: b}
	if res.StatusCode != http.StatusOK {
		var e struct{ Code, Message string }
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("%s: status %d with a body that is no Connect error: %q", method, res.StatusCode, b)
		}
		out.code, out.message = e.Code, e.Message
	}
	return out
}

// rawStream sends one enveloped request message to a server-streaming
// method (Connect streaming protocol) and reads the response to its end, or
// until ctx ends.
func (g *gateway) rawStream(t *testing.T, ctx context.Context, method, contentType string, msg []byte) rawReply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base+"/acp.v2.SessionService/"+method, bytes.NewReader(testutil.Envelope(0, msg)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	t.Cleanup(hostileHTTP.CloseIdleConnections)
	res, err := hostileHTTP.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer res.Body.Close()
	out := rawReply{status: res.StatusCode}
	for {
		flags, data, err := testutil.ReadEnvelope(res.Body)
		if err != nil {
			t.Fatalf("%s: stream ended without its end message: %v", method, err)
		}
		if flags&2 == 0 {
			out.msgs = append(out.msgs, data)
			continue
		}
		var end struct {
			Error *struct{ Code, Message string }
		}
		if err := json.Unmarshal(data, &end); err != nil {
			t.Fatalf("%s: bad end-of-stream message %q", method, data)
		}
		if end.Error != nil {
			out.code, out.message = end.Error.Code, end.Error.Message
		}
		return out
	}
}

var hostileHTTP = &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}

// pbString is a protobuf string (or bytes) field, raw: it need not be UTF-8.
func pbString(field protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, field, protowire.BytesType), s)
}

// pbMessage is a protobuf message field holding the encoded msg.
func pbMessage(field protowire.Number, msg []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, field, protowire.BytesType), msg)
}

func wantCode(t *testing.T, what string, r rawReply, code connect.Code, status int, inMessage ...string) {
	t.Helper()
	if r.code != code.String() || r.status != status {
		t.Fatalf("%s: status %d code %q (%s), want %d %s", what, r.status, r.code, r.message, status, code)
	}
	for _, s := range inMessage {
		if !strings.Contains(r.message, s) {
			t.Fatalf("%s: message %q does not mention %q", what, r.message, s)
		}
	}
}

// chatty plays a short turn: one message, then the end.
var chatty = agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
	update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"still here"}}`),
}}}}

// stillWorks runs a turn in session id and checks that its events follow
// the session's log without a gap.
func stillWorks(t *testing.T, g *gateway, id string) {
	t.Helper()
	before := snapshot(t, g, id).GetLastSeq()
	events := turn(t, g.connect, id, nil)
	if end := events[len(events)-1].GetTurnEnded(); end.GetError() != "" || end.GetStopReason() != "end_turn" {
		t.Fatalf("a turn after the hostile input ended with %v", end)
	}
	testutil.CheckSeqs(t, events, before+1)
}

func TestHostileRequestBodies(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{"chatty": agentCommand(t, chatty)}})
	id := g.create(t, "chatty")
	const js = "application/json"

	t.Run("malformed JSON", func(t *testing.T) {
		// Each message names what is wrong (protobuf-go's own wording).
		for name, c := range map[string]struct{ body, says string }{
			"truncated":       {`{"sessionId":`, "unexpected EOF"},
			"not JSON":        {`sessionId=abc`, "syntax error"},
			"an array":        {`[]`, "unexpected token ["},
			"empty":           {``, "zero-length payload"},
			"wrong type":      {`{"sessionId":5}`, "invalid value for string field sessionId"},
			"duplicate field": {`{"sessionId":"a","sessionId":"b"}`, `duplicate field "sessionId"`},
			"trailing data":   {`{"sessionId":"a"} {}`, "unexpected token {"},
		} {
			r := g.rawUnary(t, "GetSession", js, []byte(c.body))
			wantCode(t, name, r, connect.CodeInvalidArgument, http.StatusBadRequest, "unmarshal", c.says)
		}
		// A streaming method decodes its request the same way.
		r := g.rawStream(t, context.Background(), "Prompt", "application/connect+json", []byte(`{"sessionId":`))
		wantCode(t, "malformed Prompt", r, connect.CodeInvalidArgument, http.StatusOK, "unmarshal")
	})

	t.Run("oversized", func(t *testing.T) {
		huge := strings.Repeat("x", server.DefaultReadMaxBytes)
		body, _ := json.Marshal(map[string]any{"sessionId": id, "requestId": huge, "cancelled": true})
		r := g.rawUnary(t, "RespondPermission", js, body)
		wantCode(t, "oversized unary", r, connect.CodeResourceExhausted, http.StatusTooManyRequests, "larger than configured max")
		// The same through the generated clients, on a stream.
		for proto, c := range g.clients {
			stream, err := c.Prompt(context.Background(), connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt(huge)}))
			if err == nil {
				for stream.Receive() {
				}
				err = stream.Err()
				stream.Close()
			}
			if codeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "larger than") {
				t.Fatalf("oversized Prompt over %s: %v, want resource_exhausted", proto, err)
			}
		}
	})

	t.Run("unknown fields", func(t *testing.T) {
		// connect-go discards unknown JSON fields (protojson DiscardUnknown)
		// and protobuf keeps unknown fields aside: either way the request is
		// served as if they were absent.
		r := g.rawUnary(t, "GetSession", js, []byte(`{"sessionId":"`+id+`","noSuchField":{"a":[1]},"session_id_typo":"x"}`))
		if r.status != http.StatusOK || !strings.Contains(string(r.body), id) {
			t.Fatalf("GetSession with unknown JSON fields: %d %q %s", r.status, r.code, r.body)
		}
		r = g.rawUnary(t, "GetSession", js, []byte(`{"sessionId":"s_unknown","noSuchField":1}`))
		wantCode(t, "unknown fields, unknown session", r, connect.CodeNotFound, http.StatusNotFound, "s_unknown")
		pb := append(pbString(1, id), pbString(99, "unknown field 99")...)
		if r := g.rawUnary(t, "GetSession", "application/proto", pb); r.status != http.StatusOK {
			t.Fatalf("GetSession with an unknown proto field: %d %q %s", r.status, r.code, r.message)
		}
		// Unknown fields do not make a bad request good.
		r = g.rawUnary(t, "CreateSession", js, []byte(`{"agent":"chatty","cwd":"relative","extra":true}`))
		wantCode(t, "unknown fields, relative cwd", r, connect.CodeInvalidArgument, http.StatusBadRequest, "absolute")
	})

	t.Run("invalid UTF-8", func(t *testing.T) {
		bad := "s_\xff\xfe"
		r := g.rawUnary(t, "GetSession", "application/proto", pbString(1, bad))
		wantCode(t, "GetSession", r, connect.CodeInvalidArgument, http.StatusBadRequest, "UTF-8")
		r = g.rawUnary(t, "CreateSession", "application/proto", append(pbString(1, "chatty"), pbString(2, "/tmp/\xc3\x28")...))
		wantCode(t, "CreateSession", r, connect.CodeInvalidArgument, http.StatusBadRequest, "UTF-8")
		r = g.rawUnary(t, "GetSession", js, []byte("{\"sessionId\":\"s_\xff\"}"))
		wantCode(t, "GetSession over JSON", r, connect.CodeInvalidArgument, http.StatusBadRequest, "UTF-8")
		// Deep inside a prompt: PromptRequest.prompt[0].text.text.
		prompt := append(pbString(1, id), pbMessage(2, pbMessage(1, pbString(1, "hi \xff")))...)
		r = g.rawStream(t, context.Background(), "Prompt", "application/connect+proto", prompt)
		wantCode(t, "Prompt", r, connect.CodeInvalidArgument, http.StatusOK, "UTF-8")
		if len(r.msgs) != 0 {
			t.Fatalf("a refused prompt sent %d messages", len(r.msgs))
		}
		// gRPC carries the code in its trailers.
		grpcStatus, grpcMessage := grpcCall(t, g, "Prompt", prompt)
		if grpcStatus != "3" || !strings.Contains(grpcMessage, "UTF-8") {
			t.Fatalf("gRPC Prompt with invalid UTF-8: grpc-status %s (%s), want 3 (invalid argument)", grpcStatus, grpcMessage)
		}
	})

	t.Run("truncated envelope", func(t *testing.T) {
		// An envelope cut in its header, or promising more bytes than the
		// body holds: the client's fault (invalid_argument, 3), unary
		// or streaming, where connect-go said internal (13) for unary.
		whole := testutil.Envelope(0, pbString(1, id))
		for _, method := range []string{"GetSession", "Prompt"} {
			for _, cut := range []int{3, len(whole) - 2} {
				status, message := grpcRaw(t, g, method, whole[:cut])
				if status != "3" || !strings.Contains(message, "malformed request") {
					t.Errorf("gRPC %s cut at %d bytes: grpc-status %s (%s), want 3, malformed request", method, cut, status, message)
				}
			}
		}
		// gRPC-Web, its status in the headers (trailers-only) or a trailers frame.
		if status, message := grpcWebRaw(t, g, "GetSession", whole[:len(whole)-2]); status != "3" || !strings.Contains(message, "promised 28 bytes") {
			t.Errorf("gRPC-Web GetSession cut short: grpc-status %s (%s), want 3", status, message)
		}
		// Whole, the same bytes are served.
		if status, message := grpcRaw(t, g, "GetSession", whole); status != "0" {
			t.Errorf("gRPC GetSession: grpc-status %s (%s)", status, message)
		}
		if status, message := grpcWebRaw(t, g, "GetSession", whole); status != "0" {
			t.Errorf("gRPC-Web GetSession: grpc-status %s (%s)", status, message)
		}
	})

	// Nothing of the above started a turn or touched the session.
	if snap := snapshot(t, g, id); snap.GetLastSeq() != 0 {
		t.Fatalf("refused requests left %d events", snap.GetLastSeq())
	}
	stillWorks(t, g, id)
}

// grpcCall sends one gRPC request message over h2c and returns the
// grpc-status and grpc-message trailers.
func grpcCall(t *testing.T, g *gateway, method string, msg []byte) (status, message string) {
	t.Helper()
	return grpcRaw(t, g, method, testutil.Envelope(0, msg))
}

// grpcRaw sends body, as it is, as a gRPC request over h2c and returns the
// grpc-status and grpc-message trailers.
func grpcRaw(t *testing.T, g *gateway, method string, body []byte) (status, message string) {
	t.Helper()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, g.base+"/acp.v2.SessionService/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	res, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		t.Fatal(err)
	}
	status, message = res.Trailer.Get("Grpc-Status"), res.Trailer.Get("Grpc-Message")
	if status == "" { // trailers-only response
		status, message = res.Header.Get("Grpc-Status"), res.Header.Get("Grpc-Message")
	}
	return status, message
}

// grpcWebRaw sends body, as it is, as a gRPC-Web request over HTTP/1.1
// and returns the grpc-status and grpc-message of the response's trailers
// frame (or of its headers, for a trailers-only response).
func grpcWebRaw(t *testing.T, g *gateway, method string, body []byte) (status, message string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.base+"/acp.v2.SessionService/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc-web+proto")
	res, err := hostileHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	for {
		flags, data, err := testutil.ReadEnvelope(res.Body)
		if err != nil {
			return res.Header.Get("Grpc-Status"), res.Header.Get("Grpc-Message")
		}
		if flags&0x80 == 0 {
			continue
		}
		for line := range strings.SplitSeq(string(data), "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "grpc-status":
				status = strings.TrimSpace(v)
			case "grpc-message":
				message = strings.TrimSpace(v)
			}
		}
		return status, message
	}
}

// TestPromptWithValuesJSONCannotHold sends, over protobuf, a prompt whose
// unknown content block holds NaN and infinities: numbers JSON has no form
// for. The turn must run, and Connect JSON clients must still be able to
// read the session's log.
func TestPromptWithValuesJSONCannotHold(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{agents: map[string][]string{"chatty": agentCommand(t, chatty)}})
	id := g.create(t, "chatty")
	block := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Unknown{Unknown: &structpb.Struct{Fields: map[string]*structpb.Value{
		"type": structpb.NewStringValue("_numbers"),
		"nan":  structpb.NewNumberValue(math.NaN()),
		"inf":  structpb.NewNumberValue(math.Inf(-1)),
	}}}}
	pb := g.clients["connect+proto over HTTP/1.1"]
	stream, err := pb.Prompt(context.Background(), connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: []*acpv2.ContentBlock{block}}))
	if err != nil {
		t.Fatal(err)
	}
	var last *acpv2.SessionEvent
	for stream.Receive() {
		if ev := stream.Msg().GetEvent(); ev != nil {
			last = ev
		}
	}
	if err := stream.Err(); err != nil {
		// Refusing such a prompt is fine too, with a clear code.
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("Prompt with NaN over proto: %v, want success or invalid_argument", err)
		}
	} else if last.GetTurnEnded() == nil {
		t.Fatalf("the turn's stream ended with %v", last)
	}
	stream.Close()
	// Every client, JSON ones included, can replay the whole log.
	lastSeq := snapshot(t, g, id).GetLastSeq()
	for proto, c := range g.clients {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		watch, err := c.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
		if err != nil {
			t.Fatal(err)
		}
		var events []*acpv2.SessionEvent
		for uint64(len(events)) < lastSeq && watch.Receive() {
			if ev := watch.Msg().GetEvent(); ev != nil {
				events = append(events, ev)
			}
		}
		err = watch.Err()
		cancel()
		watch.Close()
		if uint64(len(events)) < lastSeq {
			t.Errorf("a %s client cannot replay the session's log: %d of %d events, then %v", proto, len(events), lastSeq, err)
			continue
		}
		testutil.CheckSeqs(t, events, 1)
	}
	stillWorks(t, g, id)
}

// hostileFS is a session directory and, beside it, files an agent must not
// reach.
type hostileFS struct {
	cwd, outside, secret, sibling string
}

const secretText = "TOP-SECRET-0451"

func newHostileFS(t *testing.T) hostileFS {
	t.Helper()
	base := t.TempDir()
	h := hostileFS{cwd: filepath.Join(base, "cwd"), outside: filepath.Join(base, "outside")}
	h.secret = filepath.Join(h.outside, "secret.txt")
	h.sibling = filepath.Join(base, "sibling.txt") // cwd/../sibling.txt
	for _, d := range []string{h.cwd, h.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{h.secret, h.sibling} {
		if err := os.WriteFile(f, []byte(secretText), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(h.cwd, "inside.txt"), []byte("inside text"), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"dirlink": h.outside, "filelink": h.secret, "abslink": "/etc"} {
		if err := os.Symlink(target, filepath.Join(h.cwd, link)); err != nil {
			t.Fatal(err)
		}
	}
	// A FIFO nobody writes to: opening it for reading blocks for ever.
	if err := syscall.Mkfifo(filepath.Join(h.cwd, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestAgentFileRequestsCannotEscapeCwd(t *testing.T) {
	t.Parallel()
	type fsCase struct {
		step agentsim.Step
		// report is the agent's report: its prefix and what the gateway's
		// JSON-RPC error said.
		prefix, error string
	}
	write := func(path string) agentsim.Step {
		return agentsim.Step{WriteFile: &agentsim.WriteFile{Path: path, Content: "planted"}}
	}
	h := newHostileFS(t)
	absPlanted := filepath.Join(h.outside, "planted-by-path.txt") // absolute, outside the cwd
	const outsideCwd = "is outside the session's working directory"
	const escapes = "path escapes from parent"
	cases := []fsCase{
		{agentsim.Step{ReadFile: "/etc/passwd"}, "read /etc/passwd: ", outsideCwd},
		{agentsim.Step{ReadFile: "{{cwd}}/../sibling.txt"}, "read {{cwd}}/../sibling.txt: ", outsideCwd},
		{agentsim.Step{ReadFile: "{{cwd}}/sub/../../sibling.txt"}, "read {{cwd}}/sub/../../sibling.txt: ", outsideCwd},
		{agentsim.Step{ReadFile: "{{cwd}}/dirlink/secret.txt"}, "read {{cwd}}/dirlink/secret.txt: ", escapes},
		{agentsim.Step{ReadFile: "{{cwd}}/filelink"}, "read {{cwd}}/filelink: ", escapes},
		{agentsim.Step{ReadFile: "{{cwd}}/abslink/passwd"}, "read {{cwd}}/abslink/passwd: ", escapes},
		{agentsim.Step{ReadFile: "inside.txt"}, "read inside.txt: ", "is not absolute"},
		{agentsim.Step{ReadFile: "{{cwd}}/fifo"}, "read {{cwd}}/fifo: ", "not a regular file"},
		{write(absPlanted), "write " + absPlanted + ": ", outsideCwd},
		{write("{{cwd}}/../planted.txt"), "write {{cwd}}/../planted.txt: ", outsideCwd},
		{write("{{cwd}}/dirlink/planted.txt"), "write {{cwd}}/dirlink/planted.txt: ", escapes},
		{write("{{cwd}}/filelink"), "write {{cwd}}/filelink: ", escapes},
		{write("planted.txt"), "write planted.txt: ", "is not absolute"},
		{write("{{cwd}}/fifo"), "write {{cwd}}/fifo: ", "not a regular file"},
		// Inside the cwd everything works.
		{agentsim.Step{ReadFile: "{{cwd}}/inside.txt"}, "read {{cwd}}/inside.txt: inside text", ""},
		{write("{{cwd}}/sub/new.txt"), "wrote {{cwd}}/sub/new.txt", ""},
	}
	var steps []agentsim.Step
	for _, c := range cases {
		steps = append(steps, c.step)
	}
	g := startGateway(t, gatewayOpts{agents: map[string][]string{
		"fs": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: steps}, chatty.Turns[0]}}),
	}})
	res, err := g.connect.CreateSession(context.Background(), connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "fs", Cwd: h.cwd}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetSessionId()
	events := turn(t, g.connect, id, nil)
	if end := events[len(events)-1].GetTurnEnded(); end.GetStopReason() != "end_turn" {
		t.Fatalf("the turn ended with %v", end)
	}
	testutil.CheckSeqs(t, events, 1)
	var reports []string
	for _, ev := range events {
		if c := ev.GetAgentMessageChunk(); c != nil {
			reports = append(reports, c.GetContent().GetText().GetText())
		}
	}
	if len(reports) != len(cases) {
		t.Fatalf("%d reports for %d requests: %q", len(reports), len(cases), reports)
	}
	for i, c := range cases {
		prefix := strings.ReplaceAll(c.prefix, "{{cwd}}", h.cwd)
		r := reports[i]
		if !strings.HasPrefix(r, prefix) || !strings.Contains(r, c.error) || strings.Contains(r, secretText) || strings.Contains(r, "root:") {
			t.Errorf("request %d: the agent got %q, want %q followed by an error mentioning %q", i, r, prefix, c.error)
		}
		if c.error != "" && strings.HasPrefix(r, "wrote") {
			t.Errorf("request %d: an escaping write succeeded: %q", i, r)
		}
	}
	for _, f := range []string{h.secret, h.sibling} {
		if b, err := os.ReadFile(f); err != nil || string(b) != secretText {
			t.Errorf("%s was changed: %q, %v", f, b, err)
		}
	}
	for _, f := range []string{absPlanted, filepath.Join(filepath.Dir(h.cwd), "planted.txt"), filepath.Join(h.outside, "planted.txt")} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("an agent planted %s outside its cwd", f)
		}
	}
	if b, err := os.ReadFile(filepath.Join(h.cwd, "sub", "new.txt")); err != nil || string(b) != "planted" {
		t.Errorf("the write inside the cwd: %q, %v", b, err)
	}
	stillWorks(t, g, id)
}

func TestHugeAgentLineLosesOnlyItsSession(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	g := startGateway(t, gatewayOpts{maxAgentLine: limit, agents: map[string][]string{
		// Far longer than the limit and than a pipe's buffer: the agent is
		// still blocked writing it when the gateway gives up on it.
		"huge":   agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{LongLine: 4 << 20}}}}}),
		"atline": agentCommand(t, agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{LongLine: limit}}}}}),
		"chatty": agentCommand(t, chatty),
	}})
	other := g.create(t, "chatty")
	turn(t, g.connect, other, nil)
	watch, stop := openWatch(t, g.connect, other)
	defer stop()

	// A line of exactly the limit is fine.
	id := g.create(t, "atline")
	events := turn(t, g.connect, id, nil)
	if end := events[len(events)-1].GetTurnEnded(); end.GetError() != "" {
		t.Fatalf("a line at the limit: turn_ended %v", end)
	}

	id = g.create(t, "huge")
	events = turn(t, g.connect, id, nil)
	end := events[len(events)-1].GetTurnEnded()
	if !strings.Contains(end.GetError(), "line too long") || !strings.Contains(end.GetError(), strconv.Itoa(limit)) {
		t.Fatalf("turn_ended = %v, want an error naming the line limit", end)
	}
	snap := snapshot(t, g, id)
	if snap.GetState() != "agent_lost" || !strings.Contains(snap.GetStateDetail(), "line too long") {
		t.Fatalf("session state %q (%q), want agent_lost: line too long", snap.GetState(), snap.GetStateDetail())
	}
	testutil.CheckSeqs(t, watchAll(t, g.connect, id, 0, int(snap.GetLastSeq())), 1)
	// The next prompt starts a new agent session, whose agent does the
	// same.
	events = startsAfresh(t, g, id)
	if end := events[len(events)-1].GetTurnEnded(); !strings.Contains(end.GetError(), "line too long") {
		t.Fatalf("the next turn ended %v, want the line limit's error again", end)
	}

	// The other session noticed nothing: its watch, open all along, sees
	// its first turn and then its next one, contiguous.
	events = turn(t, g.connect, other, nil)
	var seen []*acpv2.SessionEvent
	for uint64(len(seen)) < events[len(events)-1].GetSeq() && watch.Receive() {
		if ev := watch.Msg().GetEvent(); ev != nil {
			seen = append(seen, ev)
		}
	}
	if len(seen) < len(events) {
		t.Fatalf("the other session's watch ended after %d events: %v", len(seen), watch.Err())
	}
	testutil.CheckSeqs(t, seen, 1)
	for i, ev := range events {
		if got := seen[len(seen)-len(events)+i]; !eventEqual(got, ev) {
			t.Fatalf("the other session's watch got %v, its prompt %v", got, ev)
		}
	}
	stillWorks(t, g, other)
}

// floodScript floods n agent_message_chunk updates of size bytes each
// ("u<n>" and padding), then ends the turn; later turns are chatty.
func floodScript(n, size int) agentsim.Script {
	pad := strings.Repeat("p", max(size, 0))
	return agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{
		{Steps: []agentsim.Step{{Flood: &agentsim.Flood{Count: n,
			Update: raw(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"u{{n}} ` + pad + `"}}`)}}}},
		chatty.Turns[0],
	}}
}

// checkFlood checks that events are the flood turn's events, all of them,
// in order.
func checkFlood(t *testing.T, events []*acpv2.SessionEvent, n int) {
	t.Helper()
	testutil.CheckSeqs(t, events, 1)
	if len(events) != n+2 || events[0].GetTurnStarted() == nil || events[n+1].GetTurnEnded() == nil {
		t.Fatalf("got %d events, want turn_started, %d chunks, turn_ended", len(events), n)
	}
	for i, ev := range events[1 : n+1] {
		text := ev.GetAgentMessageChunk().GetContent().GetText().GetText()
		if want := "u" + strconv.Itoa(i+1) + " "; !strings.HasPrefix(text, want) {
			t.Fatalf("chunk %d = %.20q, want it to start %q", i, text, want)
		}
	}
}

func TestFloodOfUpdatesArrivesWhole(t *testing.T) {
	t.Parallel()
	const n = 2000
	// The buffer holds the whole flood, so that no reader can lag: what is
	// checked is that nothing is lost or reordered on the way.
	g := startGateway(t, gatewayOpts{watchBuffer: 2 * n, agents: map[string][]string{"flood": agentCommand(t, floodScript(n, 0))}})
	id := g.create(t, "flood")
	watched := make(chan []*acpv2.SessionEvent, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stream, err := g.clients["grpc over h2c"].Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
		if err != nil {
			watched <- nil
			return
		}
		defer func() { cancel(); stream.Close() }()
		var events []*acpv2.SessionEvent
		for stream.Receive() {
			if ev := stream.Msg().GetEvent(); ev != nil {
				events = append(events, ev)
				if ev.GetTurnEnded() != nil {
					break
				}
			}
		}
		watched <- events
	}()
	checkFlood(t, turn(t, g.connect, id, nil), n)
	checkFlood(t, <-watched, n)
	// Replayed from the store, in pages.
	checkFlood(t, watchAll(t, g.connect, id, 0, n+2), n)
	stillWorks(t, g, id)
}

// stalledClient is a Connect JSON client over HTTP/1.1 whose connections
// have a tiny receive buffer: a stream it does not read soon stalls the
// server's writes.
func stalledClient(t *testing.T, g *gateway) acpv2connect.SessionServiceClient {
	t.Helper()
	tr := &http.Transport{DialContext: testutil.StallingDialer().DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return acpv2connect.NewSessionServiceClient(&http.Client{Transport: tr}, g.base, connect.WithProtoJSON())
}

// resumeMessage matches the message of a stream that was cut off.
const resumeMessage = "fell too far behind and was cut off; resume with Watch afterSeq="

// follow reads session id's events after afterSeq until a turn_ended,
// resuming as told whenever the gateway cuts the stream off. It returns the
// events and how many times it was cut off. It may run in its own goroutine.
func follow(g *gateway, id string, afterSeq uint64) ([]*acpv2.SessionEvent, int, error) {
	var events []*acpv2.SessionEvent
	for cuts := 0; cuts < 1000; cuts++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		stream, err := g.connect.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id, AfterSeq: afterSeq}))
		if err != nil {
			cancel()
			return nil, cuts, err
		}
		done := false
		for !done && stream.Receive() {
			if ev := stream.Msg().GetEvent(); ev != nil {
				events = append(events, ev)
				afterSeq = ev.GetSeq()
				done = ev.GetTurnEnded() != nil
			}
		}
		err = stream.Err()
		cancel()
		stream.Close()
		if done {
			return events, cuts, nil
		}
		if codeOf(err) != connect.CodeAborted || !strings.HasSuffix(err.Error(), resumeMessage+strconv.FormatUint(afterSeq, 10)) {
			return events, cuts, fmt.Errorf("a watch ended with %v, want aborted telling to resume after %d", err, afterSeq)
		}
	}
	return events, 1000, errors.New("cut off a thousand times")
}

func TestStalledWatcherIsCutOffOthersAreNot(t *testing.T) {
	t.Parallel()
	const n, size, buffer = 1000, 0, 16
	g := startGateway(t, gatewayOpts{watchBuffer: buffer, agents: map[string][]string{"flood": agentCommand(t, floodScript(n, size))}})
	id := g.create(t, "flood")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stalled, err := stalledClient(t, g).Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	// The opening heartbeat says the watch is subscribed; then it is never
	// read again until the turn is over.
	if !stalled.Receive() || stalled.Msg().GetHeartbeat() == nil {
		t.Fatalf("no opening heartbeat: %v", stalled.Err())
	}
	type result struct {
		events []*acpv2.SessionEvent
		err    error
	}
	followed := make(chan result, 1)
	go func() {
		events, _, err := follow(g, id, 0)
		followed <- result{events, err}
	}()
	// The prompt's own stream is read, but may lag too: then it is cut off
	// like any watcher, and the turn goes on.
	stream, err := g.connect.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("flood")}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil && (codeOf(err) != connect.CodeAborted || !strings.Contains(err.Error(), resumeMessage)) {
		t.Fatalf("the prompt stream ended with %v", err)
	}
	stream.Close()
	// A reader that resumes when cut off gets every event: the turn ended,
	// the agent was not held back by the stalled watcher.
	r := <-followed
	if r.err != nil {
		t.Fatal(r.err)
	}
	checkFlood(t, r.events, n)

	// The stalled watcher got what fitted in its buffers, then the cut.
	var got []*acpv2.SessionEvent
	for stalled.Receive() {
		if ev := stalled.Msg().GetEvent(); ev != nil {
			got = append(got, ev)
		}
	}
	err = stalled.Err()
	if codeOf(err) != connect.CodeAborted || !strings.HasSuffix(err.Error(), resumeMessage+strconv.Itoa(len(got))) {
		t.Fatalf("the stalled watch ended with %v after %d events, want aborted telling to resume after %d", err, len(got), len(got))
	}
	if len(got) >= n+2 {
		t.Fatalf("the stalled watch got all %d events: it never stalled", len(got))
	}
	if v, _ := g.scrape(t).value("acp_gateway_streams_cut_off_total", "rpc=Watch"); v < 1 {
		t.Errorf("acp_gateway_streams_cut_off_total{rpc=Watch} = %v after a cut-off", v)
	}
	testutil.CheckSeqs(t, got, 1)
	// Resuming where it was cut off gives the rest.
	rest := watchAll(t, g.connect, id, uint64(len(got)), n+2-len(got))
	checkFlood(t, append(got, rest...), n)
	stillWorks(t, g, id)
}

func TestUnreadPromptStreamDoesNotStallTheSession(t *testing.T) {
	t.Parallel()
	for name, n := range map[string]int{"small turn": 3, "flood": 1000} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, gatewayOpts{watchBuffer: 64, agents: map[string][]string{"flood": agentCommand(t, floodScript(n, 0))}})
			id := g.create(t, "flood")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			unread, err := stalledClient(t, g).Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("go")}))
			if err != nil {
				t.Fatal(err)
			}
			// The turn runs to its end without the prompt's client.
			events, _, err := follow(g, id, 0)
			if err != nil {
				t.Fatal(err)
			}
			checkFlood(t, events, n)
			// The session takes the next prompt.
			stillWorks(t, g, id)
			// The unread stream holds the start of the turn, then either its
			// end or the cut.
			var last *acpv2.SessionEvent
			for unread.Receive() {
				if ev := unread.Msg().GetEvent(); ev != nil {
					if last != nil && ev.GetSeq() != last.GetSeq()+1 {
						t.Fatalf("the unread stream skipped from %d to %d", last.GetSeq(), ev.GetSeq())
					}
					last = ev
				}
			}
			switch err := unread.Err(); {
			case err == nil:
				if last.GetTurnEnded() == nil {
					t.Fatalf("the unread stream ended cleanly at %v", last)
				}
			case codeOf(err) != connect.CodeAborted || !strings.HasSuffix(err.Error(), resumeMessage+fmt.Sprint(last.GetSeq())):
				t.Fatalf("the unread stream ended with %v after seq %d", err, last.GetSeq())
			case n < 10:
				t.Fatalf("a three-event turn cut off an unread stream: %v", err)
			}
			unread.Close()
		})
	}
}

// TestJustClosedSessionIsKeptUnderTheEndedCap closes sessions in another
// order than they were made: the session just closed must stay readable
// (GetSession, Watch replay, a second CloseSession), as after any close;
// the cap drops the sessions that ended longest ago.
func TestJustClosedSessionIsKeptUnderTheEndedCap(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gatewayOpts{maxEnded: 2, agents: map[string][]string{"chatty": agentCommand(t, chatty)}})
	ctx := context.Background()
	closeSession := func(id string) error {
		_, err := g.connect.CloseSession(ctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id}))
		return err
	}
	old := g.create(t, "chatty") // made first, closed last
	for range 2 {
		if err := closeSession(g.create(t, "chatty")); err != nil {
			t.Fatal(err)
		}
	}
	if err := closeSession(old); err != nil {
		t.Fatal(err)
	}
	if _, err := g.connect.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: old})); err != nil {
		t.Fatalf("GetSession of the session just closed: %v", err)
	}
	if err := closeSession(old); err != nil {
		t.Fatalf("closing the session just closed again: %v", err)
	}
}

// deepJSON is a JSON value of levels nested objects.
func deepJSON(levels int) string {
	return strings.Repeat(`{"k":`, levels) + "1" + strings.Repeat("}", levels)
}

// deepMeta is a google.protobuf.Struct holding an array of levels-1
// nested arrays: levels JSON levels in all.
func deepMeta(levels int) *structpb.Struct {
	v := structpb.NewNumberValue(1)
	for range levels - 1 {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{"k": v}}
}

// deepPrompt is a prompt of one text block whose _meta nests levels deep.
func deepPrompt(levels int) []*acpv2.ContentBlock {
	return []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "deep", Meta: deepMeta(levels)}}}}
}

// decodable reports whether protobuf-go, with its default limits, decodes
// m's encoding into a new message of m's type.
func decodable(t *testing.T, m proto.Message) bool {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return proto.Unmarshal(b, m.ProtoReflect().New().Interface()) == nil
}

// unstorablePrompt is the shallowest prompt that protobuf decodes as a
// request but whose turn_started event, a level deeper, it does not.
func unstorablePrompt(t *testing.T) []*acpv2.ContentBlock {
	t.Helper()
	for levels := 4900; levels < 5100; levels++ {
		p := deepPrompt(levels)
		ev := &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnStarted{TurnStarted: &acpv2.TurnStarted{Prompt: p}}}
		if decodable(t, &acpv2.PromptRequest{Prompt: p}) && !decodable(t, ev) {
			return p
		}
	}
	t.Fatal("no prompt is decodable as a request but not as an event")
	return nil
}

// TestDeepJSONKeepsTheLogReadable: JSON nested deeper than protobuf can
// read back, from an agent (6,000 and 9,900 levels, under encoding/json's
// 10,000) or from a client, never reaches the log: an event that cannot
// be decoded again made Watch and GetSession fail for its session for
// good. What an agent sends that deep is kept as an unknown update, within
// the cap; a client's prompt that deep is refused. JSON as deep as the
// cap allows goes through.
func TestDeepJSONKeepsTheLogReadable(t *testing.T) {
	t.Parallel()
	call := func(id string, levels int) agentsim.Step {
		// The update object is level 1, rawInput level 2.
		return update(`{"sessionUpdate":"tool_call_update","toolCallId":"` + id + `","status":"completed","rawInput":` + deepJSON(levels-1) + `}`)
	}
	script := agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
		call("deep-6000", 6000), call("deep-9900", 9900), call("at-cap", acpjson.MaxDepth),
	}}, chatty.Turns[0], chatty.Turns[0]}}
	g := startGateway(t, gatewayOpts{agents: map[string][]string{"deep": agentCommand(t, script)}})
	id := g.create(t, "deep")
	var unknown, calls []string
	for _, ev := range turn(t, g.connect, id, nil) {
		if u := ev.GetUnknown(); u != nil {
			unknown = append(unknown, u.GetBody().GetFields()["toolCallId"].GetStringValue())
		}
		if tc := ev.GetToolCall(); tc != nil {
			calls = append(calls, tc.GetToolCallId())
		}
	}
	if !slices.Equal(unknown, []string{"deep-6000", "deep-9900"}) || !slices.Equal(calls, []string{"at-cap"}) {
		t.Fatalf("unknown updates %q, merged calls %q; want the two over the cap kept as unknown, the one at it merged", unknown, calls)
	}

	// A client's prompt: refused over the cap, over protobuf (JSON
	// clients' decoder stops at 10,000 levels of its own).
	pb := g.clients["connect+proto over HTTP/1.1"]
	prompt := func(blocks []*acpv2.ContentBlock) error {
		_, err := testutil.Turn(context.Background(), pb, &acpv2.PromptRequest{SessionId: id, Prompt: blocks}, nil)
		return err
	}
	for what, blocks := range map[string][]*acpv2.ContentBlock{
		"one level over the cap":                    deepPrompt(acpjson.MaxDepth + 1),
		"that protobuf would not read back, stored": unstorablePrompt(t),
	} {
		if err := prompt(blocks); codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "levels deep") {
			t.Fatalf("a prompt nested %s: %v, want invalid_argument", what, err)
		}
	}
	if err := prompt(deepPrompt(acpjson.MaxDepth)); err != nil {
		t.Fatalf("a prompt whose _meta nests %d levels: %v", acpjson.MaxDepth, err)
	}

	// Every client reads the whole log, and the snapshot.
	lastSeq := snapshot(t, g, id).GetLastSeq()
	for proto, c := range g.clients {
		testutil.CheckSeqs(t, watchAll(t, c, id, 0, int(lastSeq)), 1)
		if _, err := c.GetSession(context.Background(), connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id})); err != nil {
			t.Errorf("GetSession over %s: %v", proto, err)
		}
	}
	stillWorks(t, g, id)
}

// TestSnapshotsFitInOneResponse: an agent's tool calls, however many and
// large, never make a session's snapshot too large for one response, in
// any encoding. 100,000 calls made GetSession, and Watch from the start,
// fail with "message size 33177970 exceeds sendMaxBytes". The session
// keeps its calls within a response as protobuf, trimming the oldest
// finished ones; JSON, here six times larger (control characters), has
// more of them trimmed as it is sent. A trimmed call says so in its meta.
func TestSnapshotsFitInOneResponse(t *testing.T) {
	t.Parallel()
	const n, maxResponse = 300, 256 << 10
	ctl := strings.Repeat(`\u0001`, 1024)
	script := agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{{Flood: &agentsim.Flood{Count: n,
		Update: raw(`{"sessionUpdate":"tool_call_update","toolCallId":"c{{n}}","title":"call {{n}}","status":"completed","rawOutput":"` + ctl + `"}`)}}}}}}
	g := startGateway(t, gatewayOpts{sendMaxBytes: maxResponse, store: statestore.NewMemory(statestore.Options{MaxEvents: 10}),
		agents: map[string][]string{"many": agentCommand(t, script)}})
	id := g.create(t, "many")
	turn(t, g.connect, id, nil)
	ctx := context.Background()
	for proto, c := range uncompressedClients(t, g) {
		res, err := c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
		if err != nil {
			t.Fatalf("GetSession over %s: %v", proto, err)
		}
		calls := res.Msg.GetSession().GetToolCalls()
		if len(calls) != n {
			t.Fatalf("GetSession over %s: %d calls, want %d", proto, len(calls), n)
		}
		checkTrimmed(t, "GetSession over "+proto, calls)
		// Retention kept the last ten events: Watch starts with a
		// snapshot, which fits too.
		first := watchAll(t, c, id, 0, 1)[0].GetSnapshot()
		if len(first.GetToolCalls()) != n {
			t.Fatalf("Watch over %s starts with %v, want a snapshot of %d calls", proto, first, n)
		}
		checkTrimmed(t, "Watch's snapshot over "+proto, first.GetToolCalls())
	}
}

// uncompressedClients are clients of every protocol that take no
// compressed responses: the server's limit is on a compressed message's
// size where it compresses one.
func uncompressedClients(t *testing.T, g *gateway) map[string]acpv2connect.SessionServiceClient {
	t.Helper()
	h1 := &http.Client{Transport: &http.Transport{}}
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: h2c}}
	t.Cleanup(func() {
		h1.CloseIdleConnections()
		h2.CloseIdleConnections()
	})
	plain := connect.WithAcceptCompression("gzip", nil, nil)
	return map[string]acpv2connect.SessionServiceClient{
		"connect+proto": acpv2connect.NewSessionServiceClient(h1, g.base, plain),
		"connect+json":  acpv2connect.NewSessionServiceClient(h2, g.base, plain, connect.WithProtoJSON()),
		"grpc":          acpv2connect.NewSessionServiceClient(h2, g.base, plain, connect.WithGRPC()),
		"grpc-web+json": acpv2connect.NewSessionServiceClient(h1, g.base, plain, connect.WithGRPCWeb(), connect.WithProtoJSON()),
	}
}

// checkTrimmed checks that the oldest of calls are trimmed, and said to
// be, and the newest whole.
func checkTrimmed(t *testing.T, what string, calls []*acpv2.ToolCall) {
	t.Helper()
	trimmed := func(tc *acpv2.ToolCall) bool {
		return tc.GetMeta().GetFields()["acpGateway"].GetStructValue().GetFields()["trimmed"].GetBoolValue()
	}
	first, last := calls[0], calls[len(calls)-1]
	if !trimmed(first) || first.GetRawOutput() != nil || first.GetTitle() != "call 1" || trimmed(last) || last.GetRawOutput() == nil {
		t.Fatalf("%s: the oldest call %v, the newest %v; want the oldest trimmed, the newest whole", what, first, last)
	}
}

// TestHostileStateFitsInOneResponse: an agent that sends 2,000 distinct
// terminals (the state keeps 16), long config option and mode lists and a giant title does not
// make GetSession (or Watch's snapshot) too large for a response, in any
// encoding, when its state takes more than half of it: the state is cut
// to what a client needs (the title, the current mode, the terminals
// without their output). (The script is a command-line argument, at
// most 128 KiB: the state's own bounds are sessionstate's tests.)
func TestHostileStateFitsInOneResponse(t *testing.T) {
	t.Parallel()
	const maxResponse = 64 << 10
	var opts, modes []string
	for i := range 200 {
		name := fmt.Sprintf("%d%s", i, strings.Repeat("n", 60))
		opts = append(opts, `{"configId":"`+name+`","name":"`+name+`","type":"select","currentValue":"a","options":[]}`)
		modes = append(modes, `{"id":"`+name+`","name":"`+name+`"}`)
	}
	script := agentsim.Script{ProtocolVersion: 2,
		SessionModes:         raw(`{"currentModeId":"m","availableModes":[` + strings.Join(modes, ",") + `]}`),
		SessionConfigOptions: raw(`[` + strings.Join(opts, ",") + `]`),
		Turns: []agentsim.Turn{{Steps: []agentsim.Step{
			update(`{"sessionUpdate":"session_info_update","title":"` + strings.Repeat("x", 20<<10) + `"}`),
			{Flood: &agentsim.Flood{Count: 2000, Update: raw(`{"sessionUpdate":"terminal_update","terminalId":"t{{n}}","command":"` +
				strings.Repeat("c", 500) + `","output":{"data":"` + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 1000)) + `"}}`)}},
		}}}}
	g := startGateway(t, gatewayOpts{sendMaxBytes: maxResponse, store: statestore.NewMemory(statestore.Options{MaxEvents: 10}),
		agents: map[string][]string{"hostile": agentCommand(t, script)}})
	id := g.create(t, "hostile")
	turn(t, g.connect, id, nil)
	ctx := context.Background()
	for proto, c := range uncompressedClients(t, g) {
		res, err := c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
		if err != nil {
			t.Fatalf("GetSession over %s: %v", proto, err)
		}
		first := watchAll(t, c, id, 0, 1)[0].GetSnapshot()
		for what, snap := range map[string]*acpv2.SessionSnapshot{"GetSession": res.Msg.GetSession(), "Watch's snapshot": first} {
			terms := snap.GetTerminals()
			if len(snap.GetTitle()) != 4<<10 || snap.GetModes().GetCurrentModeId() != "m" || len(terms) != 16 || terms[15].GetTerminalId() != "t2000" {
				t.Fatalf("%s over %s: title of %d bytes, mode %q, %d terminals", what, proto, len(snap.GetTitle()), snap.GetModes().GetCurrentModeId(), len(terms))
			}
		}
	}
}
