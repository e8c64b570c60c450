package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// Client protocols of the gateway paths.
const (
	protoConnectJSON  = "connect+json"
	protoConnectProto = "connect+proto"
	protoGRPC         = "grpc"
	// protoConnectIdentity is connect+proto from a client that does not
	// accept gzip, so the gateway sends every message uncompressed.
	protoConnectIdentity = "connect+proto (no gzip)"
	// protoConnectDeltas is connect+proto whose streams ask for deltas
	// only (PromptRequest.deltas_only): no merged tool-call events.
	protoConnectDeltas = "connect+proto, deltas only"
	// protoACP is ACP's own JSON-RPC, one message a WebSocket text frame,
	// at the gateway's /acp (package acpnet, over package bridge).
	protoACP = "acp"
)

// transports are the HTTP clients of the gateway paths: HTTP/1.1 for
// Connect (what browsers and most Connect clients use), h2c for gRPC and
// for the many-stream phases.
type transports struct {
	h1, h2 *http.Client
}

func newTransports() *transports {
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	return &transports{
		h1: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2048, DisableCompression: true}},
		h2: &http.Client{Transport: &http.Transport{Protocols: h2c}},
	}
}

func (t *transports) close() {
	t.h1.CloseIdleConnections()
	t.h2.CloseIdleConnections()
}

// client returns a SessionService client of protocol for the gateway at
// base. h2 puts the Connect protocols on h2c too.
func (t *transports) client(protocol, base string, h2 bool) acpv2connect.SessionServiceClient {
	hc := t.h1
	if h2 || protocol == protoGRPC {
		hc = t.h2
	}
	// Every client skims its events (see skimCodec).
	switch protocol {
	case protoConnectJSON:
		return acpv2connect.NewSessionServiceClient(hc, base, connect.WithCodec(skimJSONCodec{}))
	case protoGRPC:
		return acpv2connect.NewSessionServiceClient(hc, base, connect.WithGRPC(), connect.WithCodec(skimCodec{}))
	case protoConnectIdentity:
		return acpv2connect.NewSessionServiceClient(hc, base, connect.WithAcceptCompression("gzip", nil, nil), connect.WithCodec(skimCodec{}))
	case protoConnectDeltas:
		return acpv2connect.NewSessionServiceClient(hc, base, connect.WithInterceptors(deltasOnly{}), connect.WithCodec(skimCodec{}))
	}
	return acpv2connect.NewSessionServiceClient(hc, base, connect.WithCodec(skimCodec{}))
}

// deltasOnly sets deltas_only on every Prompt and Watch request a client
// sends.
type deltasOnly struct{}

func (deltasOnly) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (deltasOnly) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return deltasConn{next(ctx, spec)}
	}
}

func (deltasOnly) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

type deltasConn struct{ connect.StreamingClientConn }

func (c deltasConn) Send(m any) error {
	switch r := m.(type) {
	case *acpv2.PromptRequest:
		r.DeltasOnly = true
	case *acpv2.WatchRequest:
		r.DeltasOnly = true
	}
	return c.StreamingClientConn.Send(m)
}

// stampOf returns the bench stamp of an event carrying an agent update:
// the update's number and send time.
func stampOf(ev *acpv2.SessionEvent) (n, t int64, ok bool) {
	var meta *structpb.Struct
	switch e := ev.GetEvent().(type) {
	case *acpv2.SessionEvent_ToolCallUpdate:
		meta = e.ToolCallUpdate.GetMeta().GetValue()
	case *acpv2.SessionEvent_ToolCallContentChunk:
		meta = e.ToolCallContentChunk.GetMeta()
	case *acpv2.SessionEvent_AgentMessageChunk:
		meta = e.AgentMessageChunk.GetMeta()
	case *acpv2.SessionEvent_AgentThoughtChunk:
		meta = e.AgentThoughtChunk.GetMeta()
	default:
		return 0, 0, false
	}
	b := meta.GetFields()["bench"].GetStructValue().GetFields()
	if b == nil {
		return 0, 0, false
	}
	t, err := strconv.ParseInt(b["t"].GetStringValue(), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return int64(b["n"].GetNumberValue()), t, true
}

// promptText is the prompt that makes the synthetic agent play w.
func promptText(w Workload) []*acpv2.ContentBlock {
	js, _ := json.Marshal(w)
	return []*acpv2.ContentBlock{{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: string(js)}}}}
}

// eventStream is a Prompt or Watch stream.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

func eventOf(s eventStream) *acpv2.SessionEvent {
	switch s := s.(type) {
	case *connect.ServerStreamForClient[acpv2.PromptResponse]:
		return s.Msg().GetEvent()
	case *connect.ServerStreamForClient[acpv2.WatchResponse]:
		return s.Msg().GetEvent()
	}
	return nil
}

// consume reads the events of stream (opened on session id) into k until
// the turn ends (turn_ended), resuming with Watch when the gateway cuts the
// stream off for lagging. It then calls stop, which must end the stream's
// context (a Watch never ends by itself), and closes the stream. onFirst,
// if set, is called at the first agent update.
func consume(ctx context.Context, c acpv2connect.SessionServiceClient, id string, stream eventStream, stop context.CancelFunc, k *tracker, onFirst func(recv int64)) error {
	var lastSeq uint64
	for {
		for stream.Receive() {
			ev := eventOf(stream)
			if ev == nil {
				continue // heartbeat
			}
			recv := time.Now().UnixNano()
			lastSeq = ev.GetSeq()
			if n, t, ok := stampOf(ev); ok {
				if onFirst != nil && k.r.Updates == 0 {
					onFirst(recv)
				}
				k.see(n, t, recv)
			}
			if ev.GetTurnEnded() != nil {
				stop()
				_ = stream.Close()
				return nil
			}
		}
		err := stream.Err()
		stop()
		_ = stream.Close()
		if connect.CodeOf(err) != connect.CodeAborted {
			if err == nil {
				err = errors.New("stream ended before turn_ended")
			}
			return err
		}
		k.r.CutOffs++
		var wctx context.Context
		wctx, stop = context.WithCancel(ctx)
		w, err := c.Watch(wctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id, AfterSeq: lastSeq}))
		if err != nil {
			stop()
			return fmt.Errorf("resuming after a cut-off: %w", err)
		}
		stream = w
	}
}

// warmUp runs one session's turn on g through c, so that one-off
// allocations do not count per session, and then reads g's memory: the
// baseline a phase's per-session figures are measured from.
func (g *gatewayProc) warmUp(ctx context.Context, c acpv2connect.SessionServiceClient, cwd string) (memStats, error) {
	if _, err := gatewayTurn(ctx, c, 2, Workload{Updates: 1}, cwd, nil); err != nil {
		return memStats{}, fmt.Errorf("warm-up: %w", err)
	}
	return g.memstats(ctx)
}

// gatewayTurn creates a session of the synthetic agent speaking protocol,
// runs one prompt turn of w on it through c, and closes the session. cpu,
// if set, reads the gateway's CPU time, taken as the prompt is sent and
// when the turn ended.
func gatewayTurn(ctx context.Context, c acpv2connect.SessionServiceClient, protocol int, w Workload, cwd string, cpu func() time.Duration) (turnResult, error) {
	created, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agentName(protocol), Cwd: cwd}))
	if err != nil {
		return turnResult{}, fmt.Errorf("CreateSession: %w", err)
	}
	id := created.Msg.GetSessionId()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = c.CloseSession(cctx, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id}))
	}()
	var cpu0 time.Duration
	if cpu != nil {
		cpu0 = cpu()
	}
	r, err := promptTurn(ctx, c, id, w, nil)
	if err != nil {
		return r, err
	}
	if cpu != nil {
		r.CPU = cpu() - cpu0
	}
	if r.Updates != w.Updates {
		return r, fmt.Errorf("received %d of %d updates", r.Updates, w.Updates)
	}
	return r, nil
}

// promptTurn runs one Prompt turn of w on session id through c and
// returns what its events brought (see consume, and onFirst there).
func promptTurn(ctx context.Context, c acpv2connect.SessionServiceClient, id string, w Workload, onFirst func(recv int64)) (turnResult, error) {
	pctx, stop := context.WithCancel(ctx)
	stream, err := c.Prompt(pctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: promptText(w)}))
	if err != nil {
		stop()
		return turnResult{}, fmt.Errorf("prompt: %w", err)
	}
	var k tracker
	k.r.Samples = make([]int64, 0, w.Updates)
	err = consume(ctx, c, id, stream, stop, &k, onFirst)
	return k.r, err
}
