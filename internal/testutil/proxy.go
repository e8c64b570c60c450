package testutil

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPProxy forwards TCP connections to a target address until Cut, for
// fault tests that cut one client off a server the others still reach.
type TCPProxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartTCPProxy starts a proxy to target on a free loopback port; it is
// closed, with its connections, when the test ends.
func StartTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	p := &TCPProxy{l: Listen(t), target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		p.l.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's host:port.
func (p *TCPProxy) Addr() string { return p.l.Addr().String() }

// Cut closes every connection through the proxy, and every one accepted
// from now until Restore, at once.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore forwards new connections again.
func (p *TCPProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *TCPProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// forward copies between c and a new connection to the target, both ways,
// until either ends or the proxy is cut.
func (p *TCPProxy) forward(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer u.Close()
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		return
	}
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, u)
		p.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// The other direction's read ends with the connection.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(u, c)
	go pipe(c, u)
	<-done
	<-done
}
