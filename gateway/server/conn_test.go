package server

import (
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// A connection's reads come from a buffer: one read of the socket takes
// in what the client sent, however small the reads of the server.
func TestConnectionReadsAreBuffered(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bl := bufferedListener{Listener: l}
	defer bl.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := bl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bc, ok := c.(*bufferedConn)
	if !ok {
		t.Fatalf("a TCP connection was accepted as %T", c)
	}
	msg := make([]byte, 100)
	for i := range msg {
		msg[i] = byte(i)
	}
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 9)
	if _, err := bc.Read(head); err != nil {
		t.Fatal(err)
	}
	if bc.r.Buffered() != len(msg)-len(head) {
		t.Fatalf("%d bytes buffered after a 9-byte read of a 100-byte write", bc.r.Buffered())
	}
	rest := make([]byte, 200)
	n, err := bc.Read(rest)
	if err != nil || n != 91 || rest[0] != 9 || rest[90] != 99 {
		t.Fatalf("the rest: %d bytes %v, err %v", n, rest[:n], err)
	}
	// Half-closing still reaches the socket.
	if err := bc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// The server's connections are buffered ones.
func TestServerBuffersItsConnections(t *testing.T) {
	srv := New(acpv2connect.UnimplementedSessionServiceHandler{}, Options{})
	var mu sync.Mutex
	var kinds []net.Conn
	srv.http.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			kinds = append(kinds, c)
			mu.Unlock()
		}
	}
	base, _ := testutil.Serve(t, srv.Serve, srv.Shutdown)
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(kinds) != 1 {
		t.Fatalf("%d connections", len(kinds))
	}
	if _, ok := kinds[0].(*bufferedConn); !ok {
		t.Fatalf("the server served a %T", kinds[0])
	}
}
