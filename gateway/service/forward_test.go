package service

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/replica"
)

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

	f := newForwarder()
	f.secret = secret
	for holder, want := range map[string]connect.Code{
		down:         connect.CodeUnavailable,
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
