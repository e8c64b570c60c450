// Package testutil holds what the tests of several packages share: the
// in-process tests (gateway/...) and the tests of the real binary
// (integration) alike. Test files cannot import each other across
// packages; this package is imported by _test.go files only (and by
// statestore/storetest, the stores' contract suite, which they import).
package testutil

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/gzipbomb"
)

// StallingDialer dials connections whose receive buffer is tiny: a
// stream its client does not read soon stalls the server's writes.
func StallingDialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a log sink or a
// process's stderr that other goroutines write while the test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WaitFor polls cond until it holds, failing the test after 15 seconds.
// The deadline only bounds a test that would otherwise hang: it asserts
// nothing about speed.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Serve runs a server on a new loopback port until the test ends. serve
// and shutdown are the server's (a gateway's Server.Serve and Shutdown);
// serve must return nil after a clean shutdown. Serve returns the server's
// base URL, "http://127.0.0.1:PORT", and stop, which shuts the server down
// before the test ends; stop fails the test if shutting down or serving
// returned an error, and does nothing when called again.
func Serve(t testing.TB, serve func(net.Listener) error, shutdown func(context.Context) error) (base string, stop func()) {
	t.Helper()
	return ServeOn(t, Listen(t), serve, shutdown)
}

// Listen returns a new loopback listener, for ServeOn.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ServeOn is Serve on the listener l, for a server that must know its
// address before it serves.
func ServeOn(t testing.TB, l net.Listener, serve func(net.Listener) error, shutdown func(context.Context) error) (base string, stop func()) {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- serve(l) }()
	stop = sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	t.Cleanup(stop)
	return "http://" + l.Addr().String(), stop
}

// Envelope frames one message of a Connect or gRPC stream: a flags byte,
// the length (4 bytes, big-endian), the message.
func Envelope(flags byte, msg []byte) []byte { return gzipbomb.Envelope(flags, msg) }

// GzipZeros is a gzip stream of mib MiB of zeros (a multiple of 16),
// about a thousandth of that in size (see gzipbomb.Zeros). Inflated, it
// is a gzip bomb.
func GzipZeros(t testing.TB, mib int) []byte {
	t.Helper()
	return gzipbomb.Zeros(mib)
}

// ReadEnvelope reads one message of a Connect or gRPC stream from r: its
// flags (2 marks a Connect stream's end message) and its data.
func ReadEnvelope(r io.Reader) (flags byte, data []byte, err error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, fmt.Errorf("reading an envelope's head: %w", err)
	}
	data = make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(r, data); err != nil {
		return head[0], nil, fmt.Errorf("reading a %d-byte message: %w", len(data), err)
	}
	return head[0], data, nil
}

// JSONEqual reports whether a and b hold the same JSON value, failing the
// test where either is not JSON. Both are decoded by encoding/json:
// objects are maps, whose member order does not count, and numbers
// float64s, whose notation (1e21 or 1e+21) does not.
func JSONEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("not JSON: %v: %s", err, a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return reflect.DeepEqual(va, vb)
}

// SameJSON fails the test unless got and want hold the same JSON value,
// as JSONEqual compares them.
func SameJSON(t testing.TB, got, want []byte) {
	t.Helper()
	if !JSONEqual(t, got, want) {
		t.Fatalf("JSON differs:\n got %s\nwant %s", got, want)
	}
}

// RedisURL is the Redis the tests use: $ACP_GATEWAY_TEST_REDIS, or
// database 9 of a local one. Tests keep their keys under a prefix of
// their own.
func RedisURL() string {
	if u := os.Getenv("ACP_GATEWAY_TEST_REDIS"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/9"
}

// Nesting is the deepest nesting of arrays and objects in the JSON data;
// the test fails when data is not JSON.
func Nesting(t testing.TB, data []byte) int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return deepest
		}
		if err != nil {
			t.Fatalf("nesting of %q: %v", data, err)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}
