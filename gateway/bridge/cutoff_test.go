package bridge_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	acp "github.com/coder/acp-go-sdk"

	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// cuttingGateway is a gateway whose every stream falls behind a turn of
// chunks agent message chunks: its Prompt stream is cut off before it
// sent the turn_started (the turn's first events lapped it), and each
// Watch after perWatch events of the session's log.
type cuttingGateway struct {
	acpv2connect.UnimplementedSessionServiceHandler
	chunks, perWatch uint64
	// watches counts the Watch streams opened.
	watches atomic.Int64
}

func (g *cuttingGateway) CreateSession(context.Context, *connect.Request[acpv2.CreateSessionRequest]) (*connect.Response[acpv2.CreateSessionResponse], error) {
	return connect.NewResponse(&acpv2.CreateSessionResponse{SessionId: "s1"}), nil
}

func (g *cuttingGateway) CloseSession(context.Context, *connect.Request[acpv2.CloseSessionRequest]) (*connect.Response[acpv2.CloseSessionResponse], error) {
	return connect.NewResponse(&acpv2.CloseSessionResponse{}), nil
}

func (g *cuttingGateway) Prompt(context.Context, *connect.Request[acpv2.PromptRequest], *connect.ServerStream[acpv2.PromptResponse]) error {
	return cutOff(0)
}

func (g *cuttingGateway) Watch(_ context.Context, req *connect.Request[acpv2.WatchRequest], stream *connect.ServerStream[acpv2.WatchResponse]) error {
	g.watches.Add(1)
	after := req.Msg.GetAfterSeq()
	for seq := after + 1; seq <= after+g.perWatch; seq++ {
		if err := stream.Send(&acpv2.WatchResponse{Event: g.event(seq)}); err != nil {
			return err
		}
		if seq == g.chunks+2 {
			return nil // the turn's end; the test's editor is done
		}
	}
	return cutOff(after + g.perWatch)
}

// event returns the session's event seq: the turn's start, its chunks
// ("1", "2"…), its end.
func (g *cuttingGateway) event(seq uint64) *acpv2.SessionEvent {
	switch {
	case seq == 1:
		return &acpv2.SessionEvent{Seq: seq, Event: &acpv2.SessionEvent_TurnStarted{TurnStarted: &acpv2.TurnStarted{
			Prompt: []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "flood"}}}}}}}
	case seq <= g.chunks+1:
		return &acpv2.SessionEvent{Seq: seq, Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{
			Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: strconv.FormatUint(seq-1, 10)}}}}}}
	default:
		return &acpv2.SessionEvent{Seq: seq, Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{StopReason: "end_turn"}}}
	}
}

// cutOff is the gateway's error for a stream that fell behind after seq.
func cutOff(seq uint64) error {
	return connect.NewError(connect.CodeAborted, errors.New(
		"this stream fell too far behind and was cut off; resume with Watch afterSeq="+strconv.FormatUint(seq, 10)))
}

// startCuttingGateway serves g and returns bridge options for it.
func startCuttingGateway(t *testing.T, g *cuttingGateway) bridge.Options {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(acpv2connect.NewSessionServiceHandler(g))
	srv := &http.Server{Handler: mux}
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections) // after the server's shutdown
	serve := func(l net.Listener) error {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
	base, _ := testutil.Serve(t, serve, srv.Shutdown)
	return bridge.Options{Client: bridge.NewClient(hc, base, testToken), Agent: "sim"}
}

// A turn whose Prompt stream is cut off before the bridge read its
// turn_started is under way all the same, and is followed in the log; and
// it is followed however many times the Watch streams are cut off, as long
// as each brings the editor some of it: the editor gets every update once,
// in order, and the turn's answer.
func TestTurnIsFollowedWhileEachWatchMakesProgress(t *testing.T) {
	t.Parallel()
	const chunks = 100
	g := &cuttingGateway{chunks: chunks, perWatch: 3}
	e := startEditor(t, startCuttingGateway(t, g), nil)
	e.countedTurn(t, chunks)
	if n := g.watches.Load(); n < (chunks+2)/3 {
		t.Errorf("the turn was followed on %d Watch streams, want one per 3 events", n)
	}
}

// Watch streams cut off before they bring anything are given up on: the
// prompt fails with the gateway's error rather than watching on forever.
func TestTurnIsGivenUpWhenWatchesMakeNoProgress(t *testing.T) {
	t.Parallel()
	g := &cuttingGateway{chunks: 10, perWatch: 0}
	e := startEditor(t, startCuttingGateway(t, g), nil)
	e.initialize(t)
	sid := e.newSession(t)
	_, err := e.prompt(testCtx(t), sid, "flood")
	var rerr *acp.RequestError
	if !errors.As(err, &rerr) || !strings.Contains(rerr.Message, "aborted") {
		t.Fatalf("session/prompt: err = %v, want the gateway's aborted", err)
	}
	if g.watches.Load() == 0 {
		t.Error("the cut-off turn was not followed at all")
	}
}

// An ACP v2 prompt whose Prompt stream is cut off before its turn_started
// is answered as accepted all the same, before the turn's updates.
func TestACPv2PromptCutOffBeforeItsStartIsAnswered(t *testing.T) {
	t.Parallel()
	const chunks = 20
	r := startRawEditor(t, startCuttingGateway(t, &cuttingGateway{chunks: chunks, perWatch: 4}))
	r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":2,"capabilities":{},"info":{"name":"test","version":"1"}}}`)
	r.next()
	r.send(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"` + t.TempDir() + `"}}`)
	r.next()
	r.send(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"flood"}]}}`)
	msgs := r.until(func(m map[string]any) bool {
		u := updateOf(m)
		return m["error"] != nil || u != nil && u["sessionUpdate"] == "state_update" && u["state"] == "idle"
	})
	if !reflect.DeepEqual(msgs[0], js(`{"jsonrpc":"2.0","id":2,"result":{}}`)) {
		t.Fatalf("the first message is %v, want the prompt's answer {}", msgs[0])
	}
	n := 0
	for _, m := range msgs[1:] {
		if u := updateOf(m); u != nil && u["sessionUpdate"] == "agent_message_chunk" {
			n++
		}
	}
	if last := updateOf(msgs[len(msgs)-1]); n != chunks || last["stopReason"] != "end_turn" {
		t.Fatalf("%d chunks, then %v; want %d, then the end of the turn", n, msgs[len(msgs)-1], chunks)
	}
}
