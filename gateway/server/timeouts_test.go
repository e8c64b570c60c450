package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/server"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// short is the timeouts of these tests; bound is how long a test waits
// for what should come after one of them (far longer: these are bounds,
// not measures). The tests of the timeouts run in synctest bubbles over
// in-memory pipes (startPipes), on a fake clock that jumps to the next
// deadline as soon as every goroutine waits: they take no real time.
const short, bound = 300 * time.Millisecond, 10 * time.Second

// ticking answers Watch with a heartbeat every 100ms, ten times; and
// GetSession as sized does.
type ticking struct{ sized }

func (ticking) Watch(ctx context.Context, _ *connect.Request[acpv2.WatchRequest], stream *connect.ServerStream[acpv2.WatchResponse]) error {
	for range 10 {
		if err := stream.Send(&acpv2.WatchResponse{Heartbeat: timestamppb.Now()}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// startPipes is start on in-memory pipes, for a test in a synctest
// bubble: it returns the listener to dial and the base URL.
func startPipes(t *testing.T, svc acpv2connect.SessionServiceHandler, opts server.Options) (*testutil.PipeListener, string) {
	t.Helper()
	srv := server.New(svc, opts)
	l, base, _ := testutil.ServePipes(t, srv.Serve, srv.Shutdown)
	return l, base
}

// dial opens a connection to l, closed when the test ends, whose reads
// give up after bound.
func dial(t *testing.T, l *testutil.PipeListener) net.Conn {
	t.Helper()
	c, err := l.DialContext(t.Context(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(bound))
	return c
}

// dialTCP opens a TCP connection to base, as dial does.
func dialTCP(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(bound))
	return c
}

// closedByServer reads c to its end and fails the test unless the server
// closed it (rather than the read timing out).
func closedByServer(t *testing.T, what string, c net.Conn) {
	t.Helper()
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset by peer") {
		t.Fatalf("%s: the connection is still open after %v: %v", what, bound, err)
	}
}

// A request body that comes too slowly, or never ends, is cut at the body
// timeout, over every protocol, and its connection goes with it.
func TestSlowRequestBodiesAreCut(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, procedure, contentType string }{
		{"Connect unary", acpv2connect.SessionServiceGetSessionProcedure, "application/json"},
		{"gRPC-Web unary", acpv2connect.SessionServiceGetSessionProcedure, "application/grpc-web+proto"},
		{"Connect stream", acpv2connect.SessionServiceWatchProcedure, "application/connect+json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l, _ := startPipes(t, ticking{}, server.Options{BodyTimeout: short})
				conn := dial(t, l)
				// 100 bytes promised, 5 sent.
				fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: %s\r\nContent-Length: 100\r\n\r\n{\"se", c.procedure, c.contentType)
				start := time.Now()
				res, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("no answer to a body that stopped: %v", err)
				}
				if waited := time.Since(start); waited != short {
					t.Errorf("answered after %v, want the body timeout, %v", waited, short)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if !strings.Contains(string(b)+res.Header.Get("Grpc-Message"), "took more than 300ms to arrive") {
					t.Errorf("answer %s %q %q, want the body's deadline", res.Status, b, res.Header.Get("Grpc-Message"))
				}
				closedByServer(t, "after a slow body", conn)
			})
		})
	}
	// Over HTTP/2 the stream is cut, the connection kept.
	t.Run("h2c", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			l, base := startPipes(t, ticking{}, server.Options{BodyTimeout: short})
			pr, pw := io.Pipe()
			defer pw.Close()
			go func() { _, _ = pw.Write([]byte(`{"se`)) }()
			req, _ := http.NewRequest(http.MethodPost, base+acpv2connect.SessionServiceGetSessionProcedure, pr)
			req.Header.Set("Content-Type", "application/json")
			res, err := (&http.Client{Transport: l.Transport(t, true), Timeout: bound}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(b), `"code":"deadline_exceeded"`) {
				t.Errorf("a slow body over h2c: %s %s", res.Status, b)
			}
		})
	})
}

// A stream outlives the body timeout and the idle timeout: its request
// was read at once, and a connection with a stream open is not idle.
func TestStreamsOutliveTheBodyAndIdleTimeouts(t *testing.T) {
	t.Parallel()
	for name, h2c := range map[string]bool{"HTTP/1.1": false, "h2c": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l, base := startPipes(t, ticking{}, server.Options{BodyTimeout: short, IdleTimeout: short})
				hc := &http.Client{Transport: l.Transport(t, h2c)}
				c := acpv2connect.NewSessionServiceClient(hc, base, connect.WithGRPCWeb())
				if h2c {
					c = acpv2connect.NewSessionServiceClient(hc, base, connect.WithGRPC())
				}
				stream, err := c.Watch(t.Context(), connect.NewRequest(&acpv2.WatchRequest{SessionId: "s"}))
				if err != nil {
					t.Fatal(err)
				}
				defer stream.Close()
				got := 0
				for stream.Receive() {
					got++
				}
				if got != 10 || stream.Err() != nil {
					t.Fatalf("a 1s stream got %d of 10 heartbeats, then %v", got, stream.Err())
				}
			})
		})
	}
}

// A connection that carries no request is closed at the idle timeout:
// HTTP/1.1 after its last response, HTTP/2 with no stream open.
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l, _ := startPipes(t, ticking{}, server.Options{IdleTimeout: short})
		h1 := dial(t, l)
		fmt.Fprint(h1, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(h1), nil)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz: %v %v", res, err)
		}
		res.Body.Close()
		start := time.Now()
		closedByServer(t, "an idle HTTP/1.1 connection", h1)
		if idle := time.Since(start); idle != short {
			t.Errorf("the idle HTTP/1.1 connection was closed after %v, want the idle timeout, %v", idle, short)
		}
		// The client's preface and empty SETTINGS, then nothing.
		h2 := dial(t, l)
		fmt.Fprint(h2, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
		start = time.Now()
		closedByServer(t, "an idle h2c connection", h2)
		// Its GOAWAY comes at the idle timeout; net/http then gives the
		// client a second to close the connection itself.
		if idle := time.Since(start); idle < short {
			t.Errorf("the idle h2c connection was closed after %v, before the idle timeout, %v", idle, short)
		}
	})
}

// Connections past the limit are closed as soon as accepted, and logged;
// one that ends makes room for another. (Over TCP: the limit is kept by
// the listener of TCP connections.)
func TestConnectionsPastTheLimitAreClosed(t *testing.T) {
	t.Parallel()
	logs := &testutil.SyncBuffer{}
	base := start(t, ticking{}, server.Options{MaxConnections: 3, Log: slog.New(slog.NewJSONHandler(logs, nil))})
	held := []net.Conn{dialTCP(t, base), dialTCP(t, base), dialTCP(t, base)}
	// The three are accepted before the fourth: each is served.
	for _, c := range held {
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
		if res, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("a connection within the limit: %v %v", res, err)
		}
	}
	closedByServer(t, "a fourth connection", dialTCP(t, base))
	if !strings.Contains(logs.String(), `"msg":"connections refused: as many are open as the gateway takes (--max-connections)","max":3,"refused":1`) {
		t.Errorf("no log line of the refusal:\n%s", logs.String())
	}
	held[0].Close()
	testutil.WaitFor(t, "a connection to be served again", func() bool {
		res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: bound}).Get(base + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

// A gRPC reflection stream, bidirectional, outlives the body timeout: its
// request body lasts as long as the client keeps asking.
func TestReflectionStreamsOutliveTheBodyTimeout(t *testing.T) {
	t.Parallel()
	// A ServerReflectionRequest with list_services (field 7) "".
	listServices := testutil.Envelope(0, []byte{7<<3 | 2, 0})
	for _, version := range []string{"v1", "v1alpha"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l, base := startPipes(t, ticking{}, server.Options{BodyTimeout: short})
				pr, pw := io.Pipe()
				defer pw.Close()
				go func() { _, _ = pw.Write(listServices) }()
				req, _ := http.NewRequest(http.MethodPost, base+"/grpc.reflection."+version+".ServerReflection/ServerReflectionInfo", pr)
				req.Header.Set("Content-Type", "application/grpc")
				req.Header.Set("Te", "trailers")
				res, err := (&http.Client{Transport: l.Transport(t, true), Timeout: bound}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				for i := range 2 {
					if i > 0 {
						time.Sleep(2 * short)
						if _, err := pw.Write(listServices); err != nil {
							t.Fatalf("the second request, after %v: %v", 2*short, err)
						}
					}
					_, data, err := testutil.ReadEnvelope(res.Body)
					if err != nil || !strings.Contains(string(data), acpv2connect.SessionServiceName) {
						t.Fatalf("answer %d: %q, %v (grpc-status %q %q)", i+1, data, err, res.Trailer.Get("Grpc-Status"), res.Trailer.Get("Grpc-Message"))
					}
				}
			})
		})
	}
}
