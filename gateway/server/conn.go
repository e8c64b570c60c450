package server

import (
	"bufio"
	"io"
	"net"
)

// readBufferSize is the read buffer of each connection.
const readBufferSize = 4 << 10

// bufferedListener gives its TCP connections a read buffer.
//
// net/http's HTTP/2 server reads frames straight from the connection: a
// read for each frame's 9-byte header and another for its payload. A
// client reading many streams sends a WINDOW_UPDATE frame per stream for
// every few KiB it reads: two system calls per 13-byte frame. With a
// buffer, one read takes in what the client sent. (HTTP/1.1 buffers its
// reads itself; a second buffer below costs a copy.)
type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		return &bufferedConn{TCPConn: tc, r: bufio.NewReaderSize(tc, readBufferSize)}, nil
	}
	return c, err
}

// bufferedConn is a TCP connection whose reads are buffered; its other
// methods are the connection's (CloseWrite, ReadFrom for sendfile, the
// deadlines).
type bufferedConn struct {
	*net.TCPConn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// WriteTo would bypass the buffer.
func (c *bufferedConn) WriteTo(w io.Writer) (int64, error) { return c.r.WriteTo(w) }
