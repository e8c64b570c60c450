package service_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
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
//
// The test runs in a synctest bubble over in-memory pipes, which buffer
// nothing: the server's writes wait as soon as the client stops reading,
// and the fake clock moves to the write deadline, or an hour on, at once.
func TestStreamOfAClientThatStopsReadingEnds(t *testing.T) {
	t.Parallel()
	const id, n = "s1", 200
	text := strings.Repeat("x", 8<<10)
	req, err := proto.Marshal(&acpv2.WatchRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	body := testutil.Envelope(0, req)

	for _, timeout := range []time.Duration{300 * time.Millisecond, 0} {
		t.Run(fmt.Sprint("timeout ", timeout), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mgr := session.NewManager(session.Options{Store: closedSession(t, id, n, func(int) string { return text }), IdleTimeout: -1})
				defer mgr.Close()
				met := metrics.New(metrics.Options{MaxSessionSeries: -1})
				srv := server.New(service.New(mgr, service.WithMetrics(met), service.WithStreamWriteTimeout(timeout)), server.Options{})
				l, _, _ := testutil.ServePipes(t, srv.Serve, srv.Shutdown)
				conn, err := l.DialContext(t.Context(), "", "")
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/connect+proto\r\nContent-Length: %d\r\n\r\n%s",
					acpv2connect.SessionServiceWatchProcedure, len(body), body)
				streams := func() float64 {
					return testutil.MetricSum(t, met.Registry(), "acp_gateway_streams_connected", "rpc=Watch")
				}
				// The stream opens with its response's headers and a
				// heartbeat; then the client reads nothing more.
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if streams() != 1 {
					t.Fatalf("%v Watch streams open, want 1", streams())
				}
				if timeout > 0 {
					time.Sleep(timeout)
					synctest.Wait()
					if streams() != 0 {
						t.Fatalf("the stream of a client that reads nothing is still open after the write timeout, %v", timeout)
					}
				} else {
					// Nothing ends it: still there an hour on.
					time.Sleep(time.Hour)
					synctest.Wait()
					if streams() != 1 {
						t.Fatal("the stream ended with no write timeout")
					}
				}
				// Read what there is now.
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
		})
	}
}

// An idle stream outlives the write timeout: the deadline only bounds
// writes under way. Over HTTP/2, where a passing deadline resets the
// stream even between writes, a Watch with a heartbeat longer than the
// timeout gets heartbeat after heartbeat, each a heartbeat interval after
// the one before (on the bubble's fake clock, over in-memory pipes).
func TestIdleStreamOutlivesTheWriteTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := statestore.NewMemory(statestore.Options{})
		if err := store.CreateSession(ctx, &statestore.Session{ID: "s1", Agent: "a", Cwd: "/", State: statestore.StateReady, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		mgr := session.NewManager(session.Options{Store: store, IdleTimeout: -1})
		defer mgr.Close()
		const heartbeat = time.Second
		srv := server.New(service.New(mgr, service.WithHeartbeat(heartbeat), service.WithStreamWriteTimeout(300*time.Millisecond)), server.Options{})
		l, base, _ := testutil.ServePipes(t, srv.Serve, srv.Shutdown)
		c := acpv2connect.NewSessionServiceClient(&http.Client{Transport: l.Transport(t, true)}, base)
		stream, err := c.Watch(ctx, connect.NewRequest(&acpv2.WatchRequest{SessionId: "s1"}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		start := time.Now()
		for i := range 3 { // the opening one and two after a second each
			if !stream.Receive() {
				t.Fatalf("the idle stream ended before heartbeat %d: %v", i, stream.Err())
			}
			if stream.Msg().GetHeartbeat() == nil {
				t.Fatalf("message %d is not a heartbeat: %v", i, stream.Msg())
			}
			if at, want := time.Since(start), time.Duration(i)*heartbeat; at != want {
				t.Fatalf("heartbeat %d came at %v, want %v", i, at, want)
			}
		}
	})
}
