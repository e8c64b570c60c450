package gzipbomb_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/acp-gateway/acp-gateway/internal/gzipbomb"
)

// A bomb inflates to the size asked for, all zeros, from about a
// thousandth of it.
func TestZerosInflate(t *testing.T) {
	t.Parallel()
	bomb := gzipbomb.Zeros(32)
	if len(bomb) > 64<<10 {
		t.Errorf("32 MiB of zeros take %d bytes compressed", len(bomb))
	}
	zr, err := gzip.NewReader(bytes.NewReader(bomb))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	buf := make([]byte, 1<<20)
	for {
		k, err := zr.Read(buf)
		if bytes.ContainsFunc(buf[:k], func(r rune) bool { return r != 0 }) {
			t.Fatal("the bomb inflates to something other than zeros")
		}
		n += int64(k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n != 32<<20 {
		t.Errorf("inflated to %d bytes, want %d", n, 32<<20)
	}
}

// Refusal reads the code of a Connect error, a Connect end-of-stream
// message and a gRPC status, in the headers or the trailers.
func TestRefusal(t *testing.T) {
	t.Parallel()
	res := func(header, trailer http.Header) *http.Response {
		return &http.Response{Header: header, Trailer: trailer}
	}
	for _, c := range []struct {
		name string
		res  *http.Response
		body string
		want string
	}{
		{"Connect unary", res(http.Header{}, nil), `{"code":"unauthenticated","message":"unauthenticated"}`, "unauthenticated"},
		{"Connect stream", res(http.Header{}, nil), "\x02\x00\x00\x00\x30" + `{"error":{"code":"resource_exhausted","message":"x"}}`, "resource_exhausted"},
		{"gRPC trailers-only", res(http.Header{"Grpc-Status": {"16"}}, nil), "", "unauthenticated"},
		{"gRPC trailers", res(http.Header{}, http.Header{"Grpc-Status": {"8"}}), "", "resource_exhausted"},
		{"gRPC other", res(http.Header{"Grpc-Status": {"3"}}, nil), "", "grpc-status 3"},
		{"gRPC ok", res(http.Header{}, http.Header{"Grpc-Status": {"0"}}), "", ""},
		{"no error", res(http.Header{}, nil), `{"sessionId":"s-1"}`, ""},
	} {
		if got := gzipbomb.Refusal(c.res, []byte(c.body)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
