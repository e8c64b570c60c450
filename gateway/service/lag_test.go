package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// A Watch stream whose client stops reading, its connection left open, is
// cut off once it is the watch buffer behind, while its write is blocked:
// not after the stream write timeout (ten minutes here), and with the
// gateway's goroutine for it gone. The session goes on; the client, when
// it reads again, gets what was in flight, then the broken stream, and
// resuming from there gives the rest. Over HTTP/1.1 (small socket
// buffers) and HTTP/2 (a small flow-control window).
//
// The first turn is more bytes than the connection holds but fewer events
// than the watch buffer: the stream is blocked in a write, not yet behind.
// The second is more events than the buffer.
//
// Not parallel: no other test's handlers run while it looks for this
// stream's goroutine.
func TestBlockedStreamIsCutOffWhenItLags(t *testing.T) {
	const big, size, small, buffer = 128, 64 << 10, 3000, 512
	turn := func(n, size int) agentsim.Turn {
		return agentsim.Turn{Steps: []agentsim.Step{{Flood: &agentsim.Flood{Count: n, Update: json.RawMessage(fmt.Sprintf(
			`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"{{n}} %s"}}`, strings.Repeat("x", size)))}}},
			StopReason: "end_turn"}
	}
	agent, err := agentsim.Command(agentsim.Script{ProtocolVersion: 1, Turns: []agentsim.Turn{turn(big, size), turn(small, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	// The receiving socket holds little, so that a client that reads
	// nothing soon blocks the gateway's writes.
	dialer := testutil.StallingDialer()
	h1 := &http.Transport{DialContext: dialer.DialContext}
	h2 := &http.Transport{DialContext: dialer.DialContext, Protocols: new(http.Protocols),
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10}}
	h2.Protocols.SetUnencryptedHTTP2(true)

	for name, tr := range map[string]*http.Transport{"HTTP/1.1": h1, "HTTP/2": h2} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			gw, err := app.New(ctx, app.Config{StreamWriteTimeout: 10 * time.Minute, Session: session.Options{
				Agents:      map[string][]string{"flood": agent},
				Env:         []string{"PATH=" + os.Getenv("PATH")},
				Store:       statestore.NewMemory(statestore.Options{}),
				Log:         slog.New(slog.DiscardHandler),
				IdleTimeout: -1,
				WatchBuffer: buffer,
			}})
			if err != nil {
				t.Fatal(err)
			}
			base, _ := testutil.Serve(t, gw.Server.Serve, gw.Shutdown)
			defer tr.CloseIdleConnections()
			plain := &http.Transport{}
			defer plain.CloseIdleConnections()
			c := acpv2connect.NewSessionServiceClient(&http.Client{Transport: plain}, base)
			created, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "flood", Cwd: t.TempDir()}))
			if err != nil {
				t.Fatal(err)
			}
			id := created.Msg.GetSessionId()
			// Without compression: the events' bytes are what goes.
			stream, err := acpv2connect.NewSessionServiceClient(&http.Client{Transport: tr}, base,
				connect.WithAcceptCompression("gzip", nil, nil)).Watch(ctx,
				connect.NewRequest(&acpv2.WatchRequest{SessionId: id}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			// The opening heartbeat; then nothing is read until the stream
			// is gone.
			if !stream.Receive() || stream.Msg().GetHeartbeat() == nil {
				t.Fatalf("no opening heartbeat: %v", stream.Err())
			}
			metric := func(name string) float64 {
				return testutil.MetricSum(t, gw.Metrics.Registry(), name, "rpc=Watch")
			}
			// The first turn is read along; it cannot cut the stream off.
			if ended, err := prompt(ctx, c, id, "turn 0"); err != nil || !ended {
				t.Fatalf("the first turn's stream: ended %v, err %v", ended, err)
			}
			if metric("acp_gateway_streams_cut_off_total") != 0 {
				t.Fatal("the stream was cut off before it was the watch buffer behind")
			}
			if _, err := prompt(ctx, c, id, "turn 1"); err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, "the blocked stream to be cut off", func() bool {
				return metric("acp_gateway_streams_cut_off_total") == 1 && metric("acp_gateway_streams_connected") == 0
			})
			waitFor(ctx, t, "the blocked stream's handler to return", func() bool {
				return !strings.Contains(goroutines(), "gateway/flush.Holdable")
			})

			// The client reads again: a run of events from the first, then
			// the stream broken, short of the first turn's end.
			var got []*acpv2.SessionEvent
			for stream.Receive() {
				if ev := stream.Msg().GetEvent(); ev != nil {
					got = append(got, ev)
				}
			}
			if stream.Err() == nil || len(got) >= big {
				t.Fatalf("the stream went on to %d events and ended with %v", len(got), stream.Err())
			}
			testutil.CheckSeqs(t, got, 1)
			t.Logf("%d events, then %v", len(got), stream.Err())
			// From where the client got to, every event of both turns is
			// there.
			rest, err := follow(ctx, c, id, uint64(len(got)), 2)
			if err != nil {
				t.Fatal(err)
			}
			testutil.CheckSeqs(t, rest, uint64(len(got))+1)
		})
	}
}

// prompt runs one turn, reading its stream to its end: the turn's, or a
// cut-off, with aborted naming the seq to resume after. It says whether it
// got the turn's end.
func prompt(ctx context.Context, c acpv2connect.SessionServiceClient, id, text string) (ended bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: []*acpv2.ContentBlock{
		{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: text}}}}}))
	if err != nil {
		return false, err
	}
	defer stream.Close()
	var last uint64
	for stream.Receive() {
		if ev := stream.Msg().GetEvent(); ev != nil {
			last = ev.GetSeq()
			if ev.GetTurnEnded() != nil {
				return true, nil
			}
		}
	}
	return false, checkCutOff(stream.Err(), last)
}

// follow watches session id after afterSeq, resuming whenever the stream
// is cut off, until it has seen the end of turns turns. It returns the
// events.
func follow(ctx context.Context, c acpv2connect.SessionServiceClient, id string, afterSeq uint64, turns int) ([]*acpv2.SessionEvent, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var events []*acpv2.SessionEvent
	for {
		stream, err := c.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: id, AfterSeq: afterSeq}))
		if err != nil {
			return events, err
		}
		for stream.Receive() {
			if ev := stream.Msg().GetEvent(); ev != nil {
				events = append(events, ev)
				afterSeq = ev.GetSeq()
				if ev.GetTurnEnded() != nil {
					if turns--; turns == 0 {
						// A watch never ends by itself: cancel it
						// before Close.
						cancel()
						_ = stream.Close()
						return events, nil
					}
				}
			}
		}
		err = checkCutOff(stream.Err(), afterSeq)
		_ = stream.Close()
		if err != nil {
			return events, err
		}
	}
}

// checkCutOff says what is wrong with a stream that ended with err after
// seq: nothing if it was cut off for lagging, as a stream that is read
// must be, with aborted naming seq to resume after.
func checkCutOff(err error, seq uint64) error {
	if connect.CodeOf(err) != connect.CodeAborted || !strings.HasSuffix(err.Error(), fmt.Sprint("resume with Watch afterSeq=", seq)) {
		return fmt.Errorf("a stream ended after seq %d with %v, want aborted naming it", seq, err)
	}
	return nil
}

// waitFor polls cond until it holds, or fails the test when ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			for _, g := range strings.Split(goroutines(), "\n\n") {
				if strings.Contains(g, "pump") {
					t.Log(g)
				}
			}
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// goroutines is the stacks of every goroutine.
func goroutines() string {
	buf := make([]byte, 1<<20)
	for {
		if n := runtime.Stack(buf, true); n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
