package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"time"

	"connectrpc.com/connect"
)

// bodyDeadline gives each request's body timeout to arrive, from when its
// handler starts: a client that sends it slower, or never ends it, holds
// a connection and a goroutine no longer. Reading the body to its end
// lifts the deadline, so a stream's request is bounded and the stream
// itself (a Watch for hours) is not. A request without a body is left
// alone: over HTTP/1.1 the server is already waiting for the client to go.
// So is an HTTP/2 request of a bidirectional stream, at one of the paths
// bidi (gRPC reflection): its body lasts as long as the stream. (Over
// HTTP/1.1, where connect-go refuses bidirectional streams without reading
// their bodies, the deadline stays, for the server's reading of what is
// left after the handler.)
func bodyDeadline(next http.Handler, timeout time.Duration, bidi ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && (r.ProtoMajor < 2 || !slices.Contains(bidi, r.URL.Path)) {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
				b := &deadlineBody{ReadCloser: r.Body, rc: rc, timeout: timeout}
				if r.ProtoMajor == 1 {
					b.header = w.Header()
				}
				r.Body = b
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody is a request body read under a deadline, which it lifts at
// its end. A read past the deadline fails with deadline_exceeded, and the
// deadline stays, so that the server, which reads what is left of a body
// after its handler, does not wait for the rest of a slow one; an HTTP/1
// connection is closed after the response (HTTP/2 resets the stream).
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	ended   bool
	// header is the response's headers over HTTP/1, else nil.
	header http.Header
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case errors.Is(err, io.EOF) && !b.ended:
		b.ended = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		if b.header != nil {
			b.header.Set("Connection", "close")
		}
		err = connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("the request's body took more than %v to arrive", b.timeout))
	}
	return n, err
}
