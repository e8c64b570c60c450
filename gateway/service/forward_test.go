package service

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/replica"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// frozen returns the address of a replica that froze (SIGSTOP): its kernel
// accepts connections and takes what is sent, but nothing answers.
func frozen(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// The session's replica down while its lease lasts is a reason to retry
// (unavailable); one that answers without proving the replica secret is
// the gateway's own failure (internal), its address told the operator
// only.
func TestForwardingRefusalCodes(t *testing.T) {
	t.Parallel()
	secret, err := replica.NewSecret([]byte(strings.Repeat("s", replica.MinSecretBytes)))
	if err != nil {
		t.Fatal(err)
	}
	other, err := replica.NewSecret([]byte(strings.Repeat("o", replica.MinSecretBytes)))
	if err != nil {
		t.Fatal(err)
	}
	// A port nothing listens on: the owner is down.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	// A replica of another deployment answers, with the wrong proof.
	mux := http.NewServeMux()
	stranger := httptest.NewServer(mux)
	t.Cleanup(stranger.Close)
	mux.Handle("POST "+replica.ProofPath, other.Handler(stranger.URL))
	// A listener that proves nothing.
	none := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(none.Close)

	// A short timeout, for the frozen replica.
	f := newForwarder(200*time.Millisecond, secret)
	for holder, want := range map[string]connect.Code{
		down:         connect.CodeUnavailable,
		frozen(t):    connect.CodeUnavailable,
		stranger.URL: connect.CodeInternal,
		none.URL:     connect.CodeInternal,
	} {
		_, err := f.remote(context.Background(), http.Header{}, holder)
		if connect.CodeOf(err) != want {
			t.Errorf("%s: %v, want %v", holder, err, want)
			continue
		}
		if strings.Contains(err.Error(), strings.TrimPrefix(holder, "http://")) {
			t.Errorf("%s: the client is told the address: %v", holder, err)
		}
		var ie *internalError
		if isInternal := errors.As(err, &ie); isInternal != (want == connect.CodeInternal) ||
			isInternal && !strings.Contains(ie.cause.Error(), "did not prove it holds the replica secret") {
			t.Errorf("%s: %v; want the cause kept for the access log exactly when internal", holder, err)
		}
		if want == connect.CodeUnavailable && !strings.Contains(err.Error(), "retry") {
			t.Errorf("%s: %v, want it to say retry", holder, err)
		}
	}
}

// slowOwner is a live replica whose Cancel answers only once it was asked
// twice whether it is alive.
type slowOwner struct {
	acpv2connect.UnimplementedSessionServiceHandler
	probes atomic.Int32
}

func (o *slowOwner) Cancel(ctx context.Context, _ *connect.Request[acpv2.CancelRequest]) (*connect.Response[acpv2.CancelResponse], error) {
	for o.probes.Load() < 2 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return connect.NewResponse(&acpv2.CancelResponse{}), nil
}

// A call forwarded to a replica that froze ends unavailable, saying to
// retry, rather than waiting for ever; a live replica that is slow to
// answer is waited for.
func TestForwardingToAFrozenReplica(t *testing.T) {
	t.Parallel()
	owner := &slowOwner{}
	mux := http.NewServeMux()
	mux.Handle(acpv2connect.NewSessionServiceHandler(owner))
	mux.HandleFunc("GET "+livenessPath, func(http.ResponseWriter, *http.Request) { owner.probes.Add(1) })
	slow := httptest.NewServer(mux)
	t.Cleanup(slow.Close)

	f := newForwarder(time.Second, nil)
	cancel := func(holder string) error {
		// Only a test that would hang is bounded here.
		ctx, stop := context.WithTimeout(context.Background(), time.Minute)
		defer stop()
		r, err := f.remote(ctx, http.Header{}, holder)
		if err != nil {
			return err
		}
		ctx, done := r.watch(ctx)
		defer done()
		_, err = r.Cancel(ctx, connect.NewRequest(&acpv2.CancelRequest{SessionId: "s"}))
		return failed(ctx, err, "")
	}
	if err := cancel(frozen(t)); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "retry") {
		t.Errorf("a call to a frozen replica: %v; want unavailable, saying to retry", err)
	}
	if err := cancel(slow.URL); err != nil {
		t.Errorf("a slow call to a live replica: %v", err)
	}
}
