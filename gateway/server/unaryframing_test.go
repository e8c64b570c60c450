package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// What unaryFraming does not refuse reaches the handler byte for byte;
// what it refuses does not reach it.
func TestUnaryFramingHandsOnTheBody(t *testing.T) {
	t.Parallel()
	const readMax = 64
	one := testutil.Envelope(0, []byte("hello"))
	for _, c := range []struct {
		name, contentType, path string
		body                    []byte
		refused                 bool
	}{
		{"one message", "application/grpc", "/acp.v2.SessionService/GetSession", one, false},
		{"two messages", "application/grpc+proto", "/acp.v2.SessionService/GetSession", append(append([]byte{}, one...), one...), false},
		{"no message", "application/grpc", "/acp.v2.SessionService/GetSession", nil, false},
		{"the second cut", "application/grpc", "/acp.v2.SessionService/GetSession", append(append([]byte{}, one...), one[:7]...), true},
		{"gRPC-Web, cut", "application/grpc-web+proto", "/acp.v2.SessionService/GetSession", one[:len(one)-1], true},
		{"gRPC-Web text is not read", "application/grpc-web-text", "/acp.v2.SessionService/GetSession", one[:3], false},
		{"a codec the server lacks is not read", "application/grpc+foo", "/acp.v2.SessionService/GetSession", one[:3], false},
		{"tidied as connect-go does", "Application/GRPC+JSON; Charset=UTF-8", "/acp.v2.SessionService/GetSession", one[:3], true},
		{"Connect is not read", "application/proto", "/acp.v2.SessionService/GetSession", one[:3], false},
		{"a stream is left to its interceptor", "application/grpc", "/acp.v2.SessionService/Watch", one[:3], false},
		// Over readMax, unread: connect-go refuses it as too large.
		{"too large", "application/grpc", "/acp.v2.SessionService/GetSession", testutil.Envelope(0, bytes.Repeat([]byte("x"), 2*readMax))[:2*readMax], false},
	} {
		var got []byte
		reached := false
		h := unaryFraming(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached = true
			var err error
			if got, err = io.ReadAll(r.Body); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}), readMax)
		req := httptest.NewRequest(http.MethodPost, c.path, bytes.NewReader(c.body))
		req.Header.Set("Content-Type", c.contentType)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if reached == c.refused {
			t.Errorf("%s: reached the handler: %v", c.name, reached)
		}
		if reached && !bytes.Equal(got, c.body) {
			t.Errorf("%s: the handler read %q, want %q", c.name, got, c.body)
		}
		if c.refused && rec.Header().Get("Grpc-Status") != "3" && !strings.Contains(rec.Body.String(), "grpc-status: 3\r\n") {
			t.Errorf("%s: refused without status 3: %v %q", c.name, rec.Header(), rec.Body.Bytes())
		}
	}
}
