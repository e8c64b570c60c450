// Package gzipbomb makes the compressed request bodies that the gateway
// must refuse without inflating them: a gzip stream of zeros that
// inflates to a thousand times its size, and the ways the protocols the
// gateway serves carry a compressed body. The tests of the network
// boundary (gateway/e2e) and the bench's bombs phase (internal/bench) send
// them.
package gzipbomb

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"io"
	"net/http"
)

// Zeros is a gzip stream of mib MiB of zeros (rounded down to a multiple
// of 16, at least 16), about a thousandth of that in size: one 16 MiB
// member, repeated (gzip readers read every member of a stream).
func Zeros(mib int) []byte {
	var member bytes.Buffer
	// Neither can fail: the level is valid and a bytes.Buffer takes
	// every write.
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	_, _ = zw.Write(make([]byte, 16<<20))
	_ = zw.Close()
	return bytes.Repeat(member.Bytes(), max(mib/16, 1))
}

// Envelope frames one message of a Connect or gRPC stream: a flags byte,
// the length (4 bytes, big-endian), the message.
func Envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// Kind is one way of sending a compressed body to a SessionService method.
type Kind struct {
	Name, Method, ContentType string
	Header                    map[string]string
	// Enveloped bodies are framed as one compressed stream message (flags
	// 1); the others are the compressed message itself.
	Enveloped bool
	// H2C marks the kinds sent over unencrypted HTTP/2 (gRPC).
	H2C bool
}

// Kinds are a Connect unary call, a gRPC unary call and a Connect stream:
// connect-go inflates a unary request's message before interceptors run,
// and a stream's as it is received.
var Kinds = []Kind{
	{Name: "Connect unary", Method: "CreateSession", ContentType: "application/proto",
		Header: map[string]string{"Content-Encoding": "gzip", "Connect-Protocol-Version": "1"}},
	{Name: "gRPC unary", Method: "GetSession", ContentType: "application/grpc", H2C: true, Enveloped: true,
		Header: map[string]string{"Grpc-Encoding": "gzip", "Te": "trailers"}},
	{Name: "Connect stream", Method: "Prompt", ContentType: "application/connect+proto", Enveloped: true,
		Header: map[string]string{"Connect-Content-Encoding": "gzip"}},
}

// NewRequest returns a request of kind k to the gateway at base carrying
// bomb (a gzip stream, enveloped here when k says so: give Envelope(1,
// bomb) as enveloped to share one copy between requests), with token as
// its bearer token when not empty.
func (k Kind) NewRequest(ctx context.Context, base string, bomb, enveloped []byte, token string) (*http.Request, error) {
	var body io.Reader = bytes.NewReader(bomb)
	if k.Enveloped {
		body = bytes.NewReader(enveloped)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/acp.v2.SessionService/"+k.Method, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", k.ContentType)
	for name, v := range k.Header {
		req.Header.Set(name, v)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req, nil
}

// Refusal returns the code a response to a request of any Kind carries:
// its grpc-status (in the headers of a trailers-only response, or in the
// trailers, which are read once body has been read to its end), or the
// "code" of a Connect error or end-of-stream message in body, by name:
// "unauthenticated", "resource_exhausted" and so on. It is "" when the
// response carries no error.
func Refusal(res *http.Response, body []byte) string {
	status := res.Header.Get("Grpc-Status")
	if status == "" {
		status = res.Trailer.Get("Grpc-Status")
	}
	switch status {
	case "":
	case "0":
		return ""
	case "8":
		return "resource_exhausted"
	case "16":
		return "unauthenticated"
	default:
		return "grpc-status " + status
	}
	if _, rest, ok := bytes.Cut(body, []byte(`"code":"`)); ok {
		if code, _, ok := bytes.Cut(rest, []byte(`"`)); ok && len(code) <= 64 {
			return string(code)
		}
	}
	return ""
}
