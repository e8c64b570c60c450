package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// recorder is a Client that notes what it receives, in order.
type recorder struct {
	mu      sync.Mutex
	got     []string
	updates []*acpv2.SessionUpdate
	// hold leaves permission requests unanswered until withdrawn.
	hold bool
}

func (r *recorder) note(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *recorder) SessionUpdates(updates []Update) {
	for _, u := range updates {
		r.sessionUpdate(u.AgentSessionID, u.Update, u.Err)
	}
}

func (r *recorder) sessionUpdate(sid string, u *acpv2.SessionUpdate, err error) {
	what := "?"
	switch {
	case u.GetAgentMessageChunk() != nil:
		what = u.GetAgentMessageChunk().GetContent().GetText().GetText()
	case u.GetUnknown() != nil:
		what = "unknown " + u.GetUnknown().GetSessionUpdate()
	case u.GetToolCallUpdate() != nil:
		what = "tool " + u.GetToolCallUpdate().GetToolCallId()
	}
	if err != nil {
		what += " (undecodable)"
	}
	r.mu.Lock()
	r.got = append(r.got, "update "+sid+" "+what)
	r.updates = append(r.updates, u)
	r.mu.Unlock()
}

func (r *recorder) RequestPermission(params json.RawMessage) (<-chan *acpv2.PermissionOutcome, func(), error) {
	r.note("permission")
	ch := make(chan *acpv2.PermissionOutcome, 1)
	if r.hold {
		// Answered only when the agent withdraws it.
		return ch, func() {
			r.note("withdrawn")
			ch <- &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_Cancelled{Cancelled: true}}
		}, nil
	}
	ch <- &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_SelectedOptionId{SelectedOptionId: "allow"}}
	return ch, func() { r.note("withdrawn") }, nil
}

func (r *recorder) Elicit(params json.RawMessage) (<-chan *acpv2.ElicitationResolved, func(), error) {
	req, err := acpjson.DecodeElicitationRequest(params, acpjson.V2)
	if err != nil {
		return nil, nil, err
	}
	r.note("elicit " + req.GetMode())
	ch := make(chan *acpv2.ElicitationResolved, 1)
	if r.hold {
		return ch, func() {
			r.note("withdrawn")
			ch <- &acpv2.ElicitationResolved{Action: acpjson.ElicitCancel}
		}, nil
	}
	ch <- &acpv2.ElicitationResolved{Action: acpjson.ElicitAccept, Content: &structpb.Struct{Fields: map[string]*structpb.Value{"name": structpb.NewStringValue("ada")}}}
	return ch, func() { r.note("withdrawn") }, nil
}

func (r *recorder) ElicitationComplete(params json.RawMessage) {
	id, err := acpjson.DecodeElicitationComplete(params)
	if err != nil {
		r.note("complete: " + err.Error())
		return
	}
	r.note("complete " + id)
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// pipeAgent is an Agent without a process: the test plays the agent on the
// other ends of its stdout and stdin.
type pipeAgent struct {
	*Agent
	out   *io.PipeWriter // the agent's stdout
	in    chan string    // lines the gateway wrote to the agent's stdin
	ended chan error     // the error that ended reading the agent's stdout
}

func newPipeAgent(t *testing.T, c Client, maxLine int, v acpjson.Version) *pipeAgent {
	t.Helper()
	outR, outW := io.Pipe()
	inR, inW := io.Pipe()
	a := &Agent{cfg: Config{Client: c, Log: slog.New(slog.DiscardHandler), MaxLine: maxLine}}
	a.ended, a.setEnded = context.WithCancel(context.Background())
	a.version.Store(int64(v))
	p := &pipeAgent{Agent: a, out: outW, in: make(chan string, 100), ended: make(chan error, 1)}
	a.connect(outR, inW, func(err error) { p.ended <- err })
	go func() {
		sc := bufio.NewScanner(inR)
		for sc.Scan() {
			p.in <- sc.Text()
		}
		close(p.in)
	}()
	t.Cleanup(func() {
		a.setEnded()
		a.conn.Close()
		outR.Close()
		inR.Close()
	})
	return p
}

func (p *pipeAgent) send(t *testing.T, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(p.out, l); err != nil {
			t.Fatalf("writing %q: %v", l, err)
		}
	}
}

// next is the next message the gateway wrote, decoded.
func (p *pipeAgent) next(t *testing.T) map[string]any {
	t.Helper()
	line, ok := <-p.in
	if !ok {
		t.Fatal("the gateway closed the agent's stdin")
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("the gateway wrote %q: %v", line, err)
	}
	return m
}

func update(sid, text string) string {
	return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + sid +
		`","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}}}`
}

// TestReadPathKeepsOrder plays an agent whose session/update notifications
// are interleaved with its requests, odd updates and the answer to a
// gateway request: the plain notifications take the one-pass path, the
// rest go through jsonrpc2 as before, and the Client sees everything in the
// agent's order.
func TestReadPathKeepsOrder(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	p := newPipeAgent(t, rec, DefaultMaxLine, acpjson.V2)

	// A request of the gateway, answered in the middle of the updates.
	type answer struct {
		sid  string
		seen []string
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		var res struct {
			SessionID string `json:"sessionId"`
		}
		err := p.conn.Call(context.Background(), "session/new", map[string]any{"cwd": "/"}, &res)
		answered <- answer{res.SessionID, rec.seen(), err}
	}()
	call := p.next(t)
	if call["method"] != "session/new" {
		t.Fatalf("the gateway sent %v, want session/new", call)
	}
	callID, _ := json.Marshal(call["id"])

	p.send(t,
		update("s", "one")+"\n",
		"\n", " \t\r\n",
		// A request with id 0, answered later.
		`{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":[]}}`+"\n",
		"  "+update("s", "two")+" \r\n",
		// With an id it is a request, not a notification: answered.
		`{"jsonrpc":"2.0","id":7,"method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"three"}}}}`+"\n",
		// Malformed: no update. Dropped, and not answered.
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"}}`+"\n",
		// Updates that do not decode are kept whole.
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":"not an object"}}`+"\n",
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call_update"}}}`+"\n",
		// Odd but valid: jsonrpc2 reads SessionId as sessionId.
		`{"jsonrpc":"2.0","method":"session/update","params":{"SessionId":"t","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"odd"}}}}`+"\n",
		`{"jsonrpc":"2.0","id":"x","method":"terminal/create","params":{}}`+"\n",
		`{"jsonrpc":"2.0","id":`+string(callID)+`,"result":{"sessionId":"new"}}`+"\n",
		update("s", "four")+"\n",
		update("s", "five"), // the last line has no newline
	)

	// The requests were answered: id 0 once the client's outcome came, id
	// 7 with a null result, the terminal with method not found. (Before the
	// end of the output, which closes the connection.)
	answers := map[string]map[string]any{}
	for range 3 {
		m := p.next(t)
		id, _ := json.Marshal(m["id"])
		answers[string(id)] = m
	}
	if r, _ := answers["0"]["result"].(map[string]any); r == nil || fmt.Sprint(r["outcome"]) != "map[optionId:allow outcome:selected]" {
		t.Errorf("the permission request was answered %v", answers["0"])
	}
	if m, ok := answers["7"]; !ok || m["result"] != nil || m["error"] != nil || !hasKey(m, "result") {
		t.Errorf("the session/update request was answered %v", m)
	}
	if e, _ := answers[`"x"`]["error"].(map[string]any); e == nil || e["code"] != float64(jsonrpc2.CodeMethodNotFound) {
		t.Errorf("terminal/create was answered %v", answers[`"x"`])
	}
	p.out.Close()

	want := []string{
		"update s one",
		"permission",
		"update s two",
		"update s three",
		"update s unknown  (undecodable)",
		"update s unknown tool_call_update (undecodable)",
		"update t odd",
		"update s four",
		"update s five",
	}
	a := <-answered
	if a.err != nil || a.sid != "new" {
		t.Fatalf("session/new: %q, %v", a.sid, a.err)
	}
	// Everything sent before the answer was handled before it.
	if len(a.seen) < 7 || strings.Join(a.seen[:7], "|") != strings.Join(want[:7], "|") {
		t.Fatalf("when session/new was answered the client had seen %q", a.seen)
	}
	if err := <-p.ended; !errors.Is(err, io.EOF) {
		t.Fatalf("read error %v, want EOF", err)
	}
	if got := rec.seen(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the client saw\n%q\nwant\n%q", got, want)
	}
	// One, two, the two undecodable ones, four and five took the one-pass path.
	if n := p.stream.directLines.Load(); n != 6 {
		t.Fatalf("%d lines took the one-pass path, want 6", n)
	}
}

// TestUpdatesDecodeWithTheAgentsVersion: ACP v1 and v2 read a null patch
// field differently, and the read loop decodes with the negotiated version.
func TestUpdatesDecodeWithTheAgentsVersion(t *testing.T) {
	t.Parallel()
	const line = `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call_update","toolCallId":"c","status":null}}}` + "\n"
	for _, v := range []acpjson.Version{acpjson.V1, acpjson.V2} {
		rec := &recorder{}
		p := newPipeAgent(t, rec, DefaultMaxLine, v)
		p.send(t, line, strings.Replace(line, `"jsonrpc"`, `"id":1,"jsonrpc"`, 1))
		p.out.Close()
		<-p.ended
		if len(rec.updates) != 2 {
			t.Fatalf("v%d: %d updates, want 2: %q", v, len(rec.updates), rec.seen())
		}
		for i, u := range rec.updates {
			// v1: null is unchanged; v2: null clears.
			if cleared := u.GetToolCallUpdate().GetStatus() != nil; cleared != (v == acpjson.V2) {
				t.Errorf("v%d, update %d: status %v", v, i, u.GetToolCallUpdate().GetStatus())
			}
		}
	}
}

// read reads messages from s until it fails.
func read(s *lineStream) (n int, err error) {
	for {
		var m json.RawMessage
		if err := s.ReadObject(&m); err != nil {
			return n, err
		}
		n++
	}
}

func TestLineLimit(t *testing.T) {
	t.Parallel()
	const limit = 64
	msg := `{"jsonrpc":"2.0","id":1,"result":null}`
	atLimit := msg + strings.Repeat(" ", limit-len(msg))
	s := newLineStream(strings.NewReader(atLimit+"\n"+atLimit+"\r\n"), nil, limit, nil)
	var ends []error
	s.onEnd = func(err error) { ends = append(ends, err) }
	// A line of the limit is fine; with a CR before its newline it is over.
	if n, err := read(s); n != 1 || !errors.Is(err, ErrLineTooLong) || !strings.Contains(err.Error(), "over 64 bytes") {
		t.Fatalf("%d messages, then %v; want 1, then a line too long", n, err)
	}
	if err := s.ReadObject(new(json.RawMessage)); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("reading on: %v", err)
	}
	if len(ends) != 1 || !errors.Is(ends[0], ErrLineTooLong) {
		t.Fatalf("onEnd was told %v, want one line too long", ends)
	}

	// Lines longer than the read buffer, under the limit.
	long := `{"jsonrpc":"2.0","id":1,"result":"` + strings.Repeat("x", 3*lineBuffer) + `"}`
	s = newLineStream(strings.NewReader(long+"\n"+msg+"\n"+long), nil, 4*lineBuffer, nil)
	if n, err := read(s); n != 3 || !errors.Is(err, io.EOF) {
		t.Fatalf("%d messages, then %v; want 3, then EOF", n, err)
	}

	// An agent that writes an endless line is stopped before its newline.
	r, w := io.Pipe()
	go func() {
		chunk := []byte(strings.Repeat("x", 1000))
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}()
	defer r.Close()
	s = newLineStream(r, nil, 100_000, nil)
	if n, err := read(s); n != 0 || !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("%d messages, then %v; want a line too long", n, err)
	}
}

// TestLinesThatAreNotMessages: what jsonrpc2 cannot read ends the stream
// with its error, recorded.
func TestLinesThatAreNotMessages(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		"this is not JSON": "invalid character 'h' in literal true",
		`{"a":1}`:          "unable to determine message type",
		"{\"a\":\"\xff\"}": "unable to determine message type",
		`{"jsonrpc":"2.0","id":1.5,"method":"x"}`: "failed to unmarshal ID",
		// Data after an update: the line is not one message.
		update("s", "x") + ` x`:             "after top-level value",
		update("s", "x") + update("s", "y"): "after top-level value",
		// An object spread over lines.
		"{\n\"jsonrpc\":\"2.0\",\"id\":1,\"result\":null}": "unexpected end of JSON input",
	} {
		rec := &recorder{}
		p := newPipeAgent(t, rec, DefaultMaxLine, acpjson.V2)
		go func() {
			_, _ = io.WriteString(p.out, line+"\n")
			p.out.Close()
		}()
		if err := <-p.ended; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: read error %v, want %q", line, err, want)
		}
		if got := rec.seen(); len(got) > 0 {
			t.Errorf("%q: the client saw %q", line, got)
		}
	}
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// outcome is what reading one line did: the client's calls and the read
// error.
func outcome(t *testing.T, line []byte, direct bool) (calls []string, updates []*acpv2.SessionUpdate, readErr error) {
	rec := &recorder{}
	p := newPipeAgent(t, rec, DefaultMaxLine, acpjson.V2)
	if !direct {
		p.stream.direct = nil
	}
	go func() {
		_, _ = p.out.Write(append(line, '\n'))
		p.out.Close()
	}()
	readErr = <-p.ended
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.got, rec.updates, readErr
}

// FuzzOnePassMatchesJSONRPC2: whatever the line, the one-pass path does
// what jsonrpc2 and handle do with it: the same updates to the client, and
// the same read error.
func FuzzOnePassMatchesJSONRPC2(f *testing.F) {
	for _, s := range []string{
		update("s", "one"),
		`{"jsonrpc":"2.0","id":7,"method":"session/update","params":{"sessionId":"s","update":{}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":"x"}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":null}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call_update"}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"SessionId":"t","update":{"sessionUpdate":"plan","entries":[]}}}`,
		`{"method":"session/update","params":{"update":{"sessionUpdate":"tool_call","toolCallId":"c","status":null,"title":"\u00e9\ud800"}},"jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":5,"update":{}}}`,
		`{"jsonrpc":"2.0","method":"session/update","result":null,"params":{"update":{}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"update":{"a":1},"update":{"b":2}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":[{}]}`,
		update("s", "x") + " x",
		`{"jsonrpc":"2.0","method":"session/cancel","params":{}}`,
		"not JSON",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.ContainsAny(line, "\n") {
			return // one line
		}
		calls, updates, err := outcome(t, line, true)
		wcalls, wupdates, werr := outcome(t, line, false)
		if strings.Join(calls, "|") != strings.Join(wcalls, "|") {
			t.Fatalf("%q: the client saw %q, through jsonrpc2 %q", line, calls, wcalls)
		}
		for i := range updates {
			if !proto.Equal(updates[i], wupdates[i]) {
				t.Fatalf("%q: update %v, through jsonrpc2 %v", line, updates[i], wupdates[i])
			}
		}
		if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Fatalf("%q: read error %v, through jsonrpc2 %v", line, err, werr)
		}
	})
}

// An agent that withdraws its own permission request ($/cancel_request)
// gets it answered cancelled at once, and the Client is told, so that no
// client answers what nobody waits for. Agent requests may use id 0.
func TestAgentWithdrawsItsPermissionRequest(t *testing.T) {
	t.Parallel()
	rec := &recorder{hold: true}
	p := newPipeAgent(t, rec, DefaultMaxLine, acpjson.V2)
	p.send(t,
		`{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":[]}}`+"\n",
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}`+"\n")
	got := make(chan map[string]any, 1)
	go func() { got <- p.next(t) }()
	select {
	case m := <-got:
		res, _ := m["result"].(map[string]any)
		outcome, _ := res["outcome"].(map[string]any)
		if m["id"] != float64(0) || outcome["outcome"] != "cancelled" {
			t.Fatalf("the answer to the withdrawn request is %v, want id 0 cancelled", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the withdrawn permission request was never answered")
	}
	if seen := rec.seen(); !slices.Equal(seen, []string{"permission", "withdrawn"}) {
		t.Fatalf("the client saw %q, want the request, then its withdrawal", seen)
	}
}

// An agent's elicitation/create reaches the Client and is answered with
// what it says; elicitation/complete reaches it in the agent's order; a
// malformed request is refused with invalid params.
func TestElicitationIsRelayed(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	p := newPipeAgent(t, rec, DefaultMaxLine, acpjson.V1)
	p.send(t,
		`{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{"sessionId":"s","mode":"form","message":"who?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}}`+"\n",
		`{"jsonrpc":"2.0","method":"elicitation/complete","params":{"elicitationId":"e1"}}`+"\n",
		`{"jsonrpc":"2.0","id":8,"method":"elicitation/create","params":{"sessionId":"s","mode":"url","message":"go"}}`+"\n")
	got := map[any]map[string]any{}
	for range 2 {
		m := p.next(t)
		got[m["id"]] = m
	}
	res, _ := got[float64(7)]["result"].(map[string]any)
	content, _ := res["content"].(map[string]any)
	if res["action"] != "accept" || content["name"] != "ada" {
		t.Fatalf("the answer to the elicitation is %v, want accept with name ada", got[float64(7)])
	}
	if e, _ := got[float64(8)]["error"].(map[string]any); e["code"] != float64(-32602) {
		t.Fatalf("a url elicitation without a url was answered %v, want invalid params", got[float64(8)])
	}
	if seen := rec.seen(); !slices.Equal(seen, []string{"elicit form", "complete e1"}) {
		t.Fatalf("the client saw %q, want the elicitation, then its completion", seen)
	}
}

// An agent's $/cancel_request for its elicitation withdraws it, as it
// does a permission request, and the agent is answered cancel.
func TestAgentWithdrawsItsElicitation(t *testing.T) {
	t.Parallel()
	rec := &recorder{hold: true}
	p := newPipeAgent(t, rec, DefaultMaxLine, acpjson.V2)
	p.send(t,
		`{"jsonrpc":"2.0","id":"e","method":"elicitation/create","params":{"sessionId":"s","mode":"url","message":"log in","url":"https://example.com/a","elicitationId":"x"}}`+"\n",
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"e"}}`+"\n")
	m := p.next(t)
	res, _ := m["result"].(map[string]any)
	if m["id"] != "e" || res["action"] != "cancel" {
		t.Fatalf("the answer to the withdrawn elicitation is %v, want id e cancel", m)
	}
	if seen := rec.seen(); !slices.Equal(seen, []string{"elicit url", "withdrawn"}) {
		t.Fatalf("the client saw %q, want the elicitation, then its withdrawal", seen)
	}
}

// A request whose caller goes away before the agent answers (a client that
// gave up on SetConfigOption) is withdrawn from the agent with
// $/cancel_request, so that the agent can stop working on it.
func TestGatewayWithdrawsARequestItNoLongerWaitsFor(t *testing.T) {
	t.Parallel()
	p := newPipeAgent(t, &recorder{}, DefaultMaxLine, acpjson.V2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.call(ctx, "session/set_mode", map[string]any{"sessionId": "s", "modeId": "plan"}, nil)
	}()
	req := p.next(t)
	if req["method"] != "session/set_mode" {
		t.Fatalf("the gateway wrote %v, want session/set_mode", req)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the call whose caller went away: %v, want context.Canceled", err)
	}
	var m map[string]any
	select {
	case line := <-p.in:
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("the gateway wrote %q: %v", line, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway wrote nothing after the caller went away")
	}
	params, _ := m["params"].(map[string]any)
	if m["method"] != "$/cancel_request" || params["requestId"] != req["id"] {
		t.Fatalf("after the caller went away the gateway wrote %v, want $/cancel_request for id %v", m, req["id"])
	}
}

// nilWithdraw answers every permission request at once and gives no way
// to withdraw it.
type nilWithdraw struct{ recorder }

func (*nilWithdraw) RequestPermission(json.RawMessage) (<-chan *acpv2.PermissionOutcome, func(), error) {
	ch := make(chan *acpv2.PermissionOutcome, 1)
	ch <- &acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_Cancelled{Cancelled: true}}
	return ch, nil, nil
}

// A $/cancel_request for a request its Client gave no withdraw for, or
// for a request it does not know, is ignored: the read loop goes on.
func TestCancelRequestWithNothingToWithdraw(t *testing.T) {
	t.Parallel()
	p := newPipeAgent(t, &nilWithdraw{}, DefaultMaxLine, acpjson.V2)
	p.send(t,
		`{"jsonrpc":"2.0","id":3,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":[]}}`+"\n",
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}`+"\n",
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"unknown"}}`+"\n",
		`{"jsonrpc":"2.0","id":4,"method":"_x/unknown","params":{}}`+"\n")
	// The permission's answer comes from a goroutine of its own: the two
	// answers in either order.
	got := map[any]bool{}
	for range 2 {
		got[p.next(t)["id"]] = true
	}
	if !got[float64(3)] || !got[float64(4)] {
		t.Fatalf("the gateway answered ids %v, want 3 and 4", got)
	}
}
