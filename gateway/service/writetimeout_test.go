package service_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/metrics"
	"github.com/acp-gateway/acp-gateway/gateway/server"
	"github.com/acp-gateway/acp-gateway/gateway/service"
	"github.com/acp-gateway/acp-gateway/gateway/session"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
	"github.com/acp-gateway/acp-gateway/statestore"
)

// A client that stops reading, its connection left open, has its Watch
// stream ended once a batch has waited the stream write timeout: the
// stream is gone while the client still reads nothing, and what it reads
// afterwards stops short of the session's events. With no timeout the
// stream waits for it for good (here, until it reads again and gets every
// event).
func TestStreamOfAClientThatStopsReadingEnds(t *testing.T) {
	t.Parallel()
	// About 32 MiB of events: more than the loopback socket buffers hold.
	const id, n = "s1", 4000
	text := strings.Repeat("x", 8<<10)
	store := closedSession(t, id, n, func(int) string { return text })
	mgr := session.NewManager(session.Options{Store: store, IdleTimeout: -1})
	defer mgr.Close()
	req, err := proto.Marshal(&acpv2.WatchRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	body := testutil.Envelope(0, req)

	for _, timeout := range []time.Duration{300 * time.Millisecond, 0} {
		t.Run(fmt.Sprint("timeout ", timeout), func(t *testing.T) {
			met := metrics.New(metrics.Options{MaxSessionSeries: -1})
			srv := server.New(service.New(mgr, service.WithMetrics(met), service.WithStreamWriteTimeout(timeout)), server.Options{})
			base, _ := testutil.Serve(t, srv.Serve, srv.Shutdown)
			conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/connect+proto\r\nContent-Length: %d\r\n\r\n%s",
				acpv2connect.SessionServiceWatchProcedure, len(body), body)
			streams := func() float64 {
				return testutil.MetricSum(t, met.Registry(), "acp_gateway_streams_connected", "rpc=Watch")
			}
			testutil.WaitFor(t, "the Watch stream to open", func() bool { return streams() == 1 })
			if timeout > 0 {
				testutil.WaitFor(t, "the stream of a client that reads nothing to end", func() bool { return streams() == 0 })
			} else {
				// Nothing ends it: still there after several times the
				// timeout of the case above.
				time.Sleep(2 * time.Second)
				if streams() != 1 {
					t.Fatal("the stream ended with no write timeout")
				}
			}
			// Read what there is now.
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got := 0
			for {
				flags, msg, err := testutil.ReadEnvelope(resp.Body)
				if err != nil || flags != 0 {
					break
				}
				var w acpv2.WatchResponse
				if proto.Unmarshal(msg, &w) == nil && w.GetEvent() != nil {
					got++
				}
			}
			switch {
			case timeout > 0 && got >= n:
				t.Fatalf("the client got all %d events of a stream that should have ended", got)
			case timeout == 0 && got != n+1:
				t.Fatalf("the client got %d events, want all %d and the closed event", got, n)
			}
		})
	}
}

// An idle stream outlives the write timeout: the deadline only bounds
// writes under way. Over HTTP/2, where a passing deadline resets the
// stream even between writes, a Watch with a heartbeat longer than the
// timeout gets heartbeat after heartbeat.
func TestIdleStreamOutlivesTheWriteTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := statestore.NewMemory(statestore.Options{})
	if err := store.CreateSession(ctx, &statestore.Session{ID: "s1", Agent: "a", Cwd: "/", State: statestore.StateReady, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	mgr := session.NewManager(session.Options{Store: store, IdleTimeout: -1})
	defer mgr.Close()
	srv := server.New(service.New(mgr, service.WithHeartbeat(time.Second), service.WithStreamWriteTimeout(300*time.Millisecond)), server.Options{})
	base, _ := testutil.Serve(t, srv.Serve, srv.Shutdown)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := acpv2connect.NewSessionServiceClient(&http.Client{Transport: tr}, base)
	stream, err := c.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: "s1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for i := range 3 { // the opening one and two after a second each
		if !stream.Receive() {
			t.Fatalf("the idle stream ended before heartbeat %d: %v", i, stream.Err())
		}
		if stream.Msg().GetHeartbeat() == nil {
			t.Fatalf("message %d is not a heartbeat: %v", i, stream.Msg())
		}
	}
}
