package server

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// readBufferSize is the read buffer of each connection.
const readBufferSize = 4 << 10

// bufferedListener gives its TCP connections a read buffer, and closes
// those beyond limit's at once.
//
// net/http's HTTP/2 server reads frames straight from the connection: a
// read for each frame's 9-byte header and another for its payload. A
// client reading many streams sends a WINDOW_UPDATE frame per stream for
// every few KiB it reads: two system calls per 13-byte frame. With a
// buffer, one read takes in what the client sent. (HTTP/1.1 buffers its
// reads itself; a second buffer below costs a copy.)
type bufferedListener struct {
	net.Listener
	// limit bounds the connections open at once; nil: no bound.
	limit *connLimit
}

func (l bufferedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		tc, ok := c.(*net.TCPConn)
		if !ok {
			return c, err
		}
		bc := &bufferedConn{TCPConn: tc, r: bufio.NewReaderSize(tc, readBufferSize)}
		if l.limit == nil {
			return bc, nil
		}
		if !l.limit.take() {
			l.limit.refused(tc.RemoteAddr())
			_ = tc.Close()
			continue
		}
		bc.release = sync.OnceFunc(l.limit.release)
		return bc, nil
	}
}

// bufferedConn is a TCP connection whose reads are buffered; its other
// methods are the connection's (CloseWrite, ReadFrom for sendfile, the
// deadlines).
type bufferedConn struct {
	*net.TCPConn
	r *bufio.Reader
	// release, when set, gives the connection's place back to its limit.
	release func()
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// WriteTo would bypass the buffer.
func (c *bufferedConn) WriteTo(w io.Writer) (int64, error) { return c.r.WriteTo(w) }

// Close gives the connection's place back first: its client, once it
// sees the connection closed, finds the place free.
func (c *bufferedConn) Close() error {
	if c.release != nil {
		c.release()
	}
	return c.TCPConn.Close()
}

// connLimit counts the open connections against a maximum, and logs the
// connections it refuses, at most one line every refusalLogEvery.
type connLimit struct {
	max     int64
	open    atomic.Int64
	log     *slog.Logger
	refusal refusalLog
}

// take reports whether a new connection may stay open, counting it.
func (l *connLimit) take() bool {
	if l.open.Add(1) > l.max {
		l.open.Add(-1)
		return false
	}
	return true
}

func (l *connLimit) release() { l.open.Add(-1) }

func (l *connLimit) refused(client net.Addr) {
	if l.log == nil {
		return
	}
	if ok, refused := l.refusal.allow(time.Now()); ok {
		l.log.Warn("connections refused: as many are open as the gateway takes (--max-connections)",
			"max", l.max, "refused", refused, "client", client.String())
	}
}
