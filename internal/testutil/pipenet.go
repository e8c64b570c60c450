package testutil

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
)

// PipeListener is a net.Listener whose connections are in-memory pipes
// (net.Pipe), dialled with DialContext: the network of a server tested in
// a testing/synctest bubble. A goroutine waiting on a pipe (a read, a
// write its peer does not read, a deadline) is durably blocked, so the
// bubble's fake clock jumps to the next deadline or timer at once; a
// goroutine waiting on a real socket is not, and would hold the clock
// still. A pipe buffers nothing: a write waits for the peer's read.
//
// Make it inside the bubble whose goroutines use it.
type PipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	close  func()
}

// NewPipeListener returns a PipeListener that accepts until closed.
func NewPipeListener() *PipeListener {
	closed := make(chan struct{})
	return &PipeListener{conns: make(chan net.Conn), closed: closed, close: sync.OnceFunc(func() { close(closed) })}
}

// pipeAddr is the address of a PipeListener: a loopback name, which the
// gateway's Host check accepts.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "localhost:80" }

// Accept waits for a connection dialled with DialContext.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and DialContext; connections made stay open.
func (l *PipeListener) Close() error {
	l.close()
	return nil
}

// Addr is "localhost:80".
func (l *PipeListener) Addr() net.Addr { return pipeAddr{} }

// DialContext returns the client's end of a new connection, once Accept
// took the server's; network and address are ignored. A closed listener
// refuses it (syscall.ECONNREFUSED).
func (l *PipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		err := &net.OpError{Op: "dial", Net: "pipe", Addr: pipeAddr{}, Err: syscall.ECONNREFUSED}
		return nil, errors.Join(err, client.Close(), server.Close())
	case <-ctx.Done():
		return nil, errors.Join(ctx.Err(), client.Close(), server.Close())
	}
}

// Transport returns an HTTP transport that dials l, speaking HTTP/1.1, or
// HTTP/2 without TLS (h2c) when h2c is set. Its idle connections are
// closed when the test ends.
func (l *PipeListener) Transport(t testing.TB, h2c bool) *http.Transport {
	tr := &http.Transport{DialContext: l.DialContext}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// ServePipes is Serve on a new PipeListener, for a test in a synctest
// bubble: it returns the listener, whose DialContext and Transport reach
// the server, the server's base URL, "http://localhost:80", and stop, as
// Serve's.
func ServePipes(t testing.TB, serve func(net.Listener) error, shutdown func(context.Context) error) (l *PipeListener, base string, stop func()) {
	t.Helper()
	l = NewPipeListener()
	base, stop = ServeOn(t, l, serve, shutdown)
	return l, base, stop
}
