package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// serve serves p on loopback for the test, and returns its address and
// log.
func serve(t *testing.T, p *Policy) (string, *testutil.SyncBuffer) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := &testutil.SyncBuffer{}
	x := p.Serve(l, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(x.Close)
	return l.Addr().String(), log
}

// send writes the raw request req to the proxy at addr and reads the
// response.
func send(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(req, "CONNECT") {
		body, _ = io.ReadAll(res.Body)
	}
	return res, string(body)
}

// TestProxyHidesResolverErrors: the agent is told that a name cannot be
// resolved, not by which server; the log has the detail.
func TestProxyHidesResolverErrors(t *testing.T) {
	p, _ := NewPolicy(nil)
	p.hostAddrs = testHostAddrs()
	p.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, Server: "10.255.255.53:53"}
	}
	addr, log := serve(t, p)
	for _, req := range []string{
		"CONNECT nowhere.example:443 HTTP/1.1\r\nHost: nowhere.example:443\r\n\r\n",
		"GET http://nowhere.example/ HTTP/1.1\r\nHost: nowhere.example\r\n\r\n",
	} {
		res, body := send(t, addr, req)
		if res.StatusCode != http.StatusBadGateway || strings.Contains(body, "10.255.255.53") || !strings.Contains(body, "cannot resolve nowhere.example") {
			t.Errorf("%q: %s %q", req, res.Status, body)
		}
	}
	if !strings.Contains(log.String(), "10.255.255.53") {
		t.Errorf("the log lacks the resolver's error:\n%s", log)
	}
}

// TestProxyStripsHopByHopHeaders: a plain http:// request is forwarded,
// and its response returned, without the headers of one hop.
func TestProxyStripsHopByHopHeaders(t *testing.T) {
	var got http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		h := w.Header()
		h.Set("Connection", "X-Resp-Hop")
		h.Set("X-Resp-Hop", "1")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic realm=up")
		h.Set("Upgrade", "foo/1")
		h.Set("X-End-To-End", "kept")
		fmt.Fprint(w, "upstream")
	}))
	defer up.Close()
	host := strings.TrimPrefix(up.URL, "http://")
	p, err := NewPolicy([]string{host})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, p)
	res, body := send(t, addr, "GET "+up.URL+"/x HTTP/1.1\r\nHost: "+host+"\r\n"+
		"Connection: keep-alive, X-Req-Hop\r\n"+
		"X-Req-Hop: secret\r\n"+
		"Keep-Alive: timeout=5\r\n"+
		"Proxy-Connection: keep-alive\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\n"+
		"Te: gzip\r\n"+
		"Trailer: X-Trailer\r\n"+
		"Upgrade: websocket\r\n"+
		"X-End-To-End: kept\r\n\r\n")
	if res.StatusCode != http.StatusOK || body != "upstream" {
		t.Fatalf("%s %q", res.Status, body)
	}
	for _, h := range []string{"Connection", "X-Req-Hop", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te", "Trailer", "Upgrade"} {
		if v, ok := got[h]; ok {
			t.Errorf("forwarded %s: %q", h, v)
		}
	}
	if got.Get("X-End-To-End") != "kept" {
		t.Errorf("X-End-To-End not forwarded: %v", got)
	}
	for _, h := range []string{"X-Resp-Hop", "Keep-Alive", "Proxy-Authenticate", "Upgrade"} {
		if v, ok := res.Header[h]; ok {
			t.Errorf("returned %s: %q", h, v)
		}
	}
	if strings.Contains(res.Header.Get("Connection"), "X-Resp-Hop") {
		t.Errorf("returned Connection: %q", res.Header.Get("Connection"))
	}
	if res.Header.Get("X-End-To-End") != "kept" {
		t.Errorf("X-End-To-End not returned: %v", res.Header)
	}
}

// TestProxyTriesEachAddress: when a name's first address does not
// answer, the next is dialled.
func TestProxyTriesEachAddress(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "hello")
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(up.Addr().String())
	// Nothing listens on 127.0.0.2, which is loopback too.
	if c, err := net.DialTimeout("tcp", "127.0.0.2:"+port, time.Second); err == nil {
		c.Close()
		t.Skip("something listens on 127.0.0.2:" + port)
	}
	p, err := NewPolicy([]string{"multi.example:" + port})
	if err != nil {
		t.Fatal(err)
	}
	p.lookup = testLookup(map[string][]string{"multi.example": {"127.0.0.2", "127.0.0.1"}})
	addr, _ := serve(t, p)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT multi.example:%s HTTP/1.1\r\nHost: multi.example:%s\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("%s %q", res.Status, b)
	}
	if b, _ := io.ReadAll(br); string(b) != "hello" {
		t.Errorf("tunnel: %q", b)
	}
}

// TestDialFirstSharesTheTime: an address that does not answer has its
// share of the time, and the next one the rest.
func TestDialFirstSharesTheTime(t *testing.T) {
	defer func(d time.Duration) { minDialShare = d }(minDialShare)
	minDialShare = 10 * time.Millisecond
	addrs := []netip.AddrPort{
		netip.MustParseAddrPort("192.0.2.1:80"), // hangs
		netip.MustParseAddrPort("192.0.2.2:80"), // refuses
		netip.MustParseAddrPort("192.0.2.3:80"), // answers
	}
	var tried []string
	dial := func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		tried = append(tried, a.String())
		switch a {
		case addrs[0]:
			<-ctx.Done()
			return nil, ctx.Err()
		case addrs[1]:
			return nil, errors.New("connection refused")
		}
		c, _ := net.Pipe()
		return c, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := dialFirst(ctx, addrs, dial)
	if err != nil {
		t.Fatalf("%v after %v (tried %v)", err, time.Since(start), tried)
	}
	c.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v: the first address had all the time", d)
	}
	if len(tried) != 3 {
		t.Errorf("tried %v", tried)
	}

	// None answers: the first error.
	tried = nil
	_, err = dialFirst(ctx, addrs[1:2], dial)
	if err == nil || err.Error() != "connection refused" {
		t.Errorf("%v", err)
	}
}
