package acpnet

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/bridge"
)

// heldResumer is a bridge's Resumer whose Resume waits for release, then
// finds the session another user's.
type heldResumer struct{ entered, release chan struct{} }

func (r heldResumer) Resume(context.Context, string, bridge.Position) error {
	close(r.entered)
	<-r.release
	return connect.NewError(connect.CodePermissionDenied, errors.New("not the caller's session"))
}

// TestAStreamBeingResumedIsNotServed: while a GET with Last-Event-ID takes
// a session up on a connection (its Resume checks that the user may see
// the session), another GET of that session's stream is refused, not
// served as a stream the connection has; and when the check fails, the
// connection has no stream of the session.
func TestAStreamBeingResumedIsNotServed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &Handler{opts: Options{Log: slog.New(slog.DiscardHandler)}}
	r := heldResumer{entered: make(chan struct{}), release: make(chan struct{})}
	c := &httpConn{ctx: ctx, cancel: cancel, h: h, streams: map[string]*sseStream{"": newStream(false)}, resumer: r}
	get := func(ctx context.Context, lastID string) int {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/acp", nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set(HeaderSessionID, "s_bobs")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		w := httptest.NewRecorder()
		h.sse(w, req, c)
		return w.Code
	}
	first := make(chan int, 1)
	go func() { first <- get(context.Background(), "3") }()
	<-r.entered
	// Its context has ended, so that a GET served as a stream returns.
	ended, end := context.WithCancel(context.Background())
	end()
	if code := get(ended, ""); code != http.StatusConflict {
		t.Errorf("a GET while the stream was being resumed: %d, want 409", code)
	}
	close(r.release)
	if code := <-first; code != http.StatusNotFound {
		t.Errorf("the resume of another user's session: %d, want 404", code)
	}
	c.mu.Lock()
	_, kept := c.streams["s_bobs"]
	c.mu.Unlock()
	if kept {
		t.Error("the connection kept a stream of a session it could not resume")
	}
}
