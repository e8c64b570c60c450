package acpnet_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/acp-gateway/acp-gateway/gateway/app"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// selfSigned returns a server TLS config with a new self-signed
// certificate for 127.0.0.1, and the pool that trusts it.
func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	der, key := testutil.SelfSigned(t)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
}

// protoRecorder records the protocol of each response it carries.
type protoRecorder struct {
	next  http.RoundTripper
	mu    sync.Mutex
	proto []string
}

func (p *protoRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := p.next.RoundTrip(r)
	if err == nil {
		p.mu.Lock()
		alpn := ""
		if res.TLS != nil {
			alpn = res.TLS.NegotiatedProtocol
		}
		p.proto = append(p.proto, res.Proto+" "+alpn)
		p.mu.Unlock()
	}
	return res, err
}

func (p *protoRecorder) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.proto...)
}

// TestTLSServesHTTP2: with a certificate the gateway serves HTTPS, and a
// client that offers h2 gets HTTP/2 for the Connect API and for /acp's
// Streamable HTTP; a WebSocket (an HTTP/1.1 upgrade) works over TLS too.
func TestTLSServesHTTP2(t *testing.T) {
	t.Parallel()
	serverTLS, pool := selfSigned(t)
	g := startGateway(t, app.Config{TLS: serverTLS})
	if !strings.HasPrefix(g.base, "https://") {
		t.Fatalf("base %s", g.base)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	rec := &protoRecorder{next: tr}
	hc := &http.Client{Transport: rec}

	// The Connect API.
	client := bridge.NewClient(hc, g.base, aliceToken)
	if _, err := client.ListSessions(testCtx(t), connect.NewRequest(&acpv2.ListSessionsRequest{})); err != nil {
		t.Fatalf("ListSessions over TLS: %v", err)
	}

	// /acp, Streamable HTTP.
	post := func(conn, session, body string) *http.Response {
		req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, g.base+"/acp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		req.Header.Set("Content-Type", "application/json")
		if conn != "" {
			req.Header.Set("Acp-Connection-Id", conn)
		}
		if session != "" {
			req.Header.Set("Acp-Session-Id", session)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := post("", "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	conn := res.Header.Get("Acp-Connection-Id")
	if res.StatusCode != http.StatusOK || conn == "" {
		t.Fatalf("initialize over TLS: %d", res.StatusCode)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/acp", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Acp-Connection-Id", conn)
	req.Header.Set("Accept", "text/event-stream")
	stream, err := hc.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("GET the connection's stream over TLS: %v %v", stream, err)
	}
	defer stream.Body.Close()
	res = post(conn, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, t.TempDir()))
	res.Body.Close()
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), `"sessionId"`) {
		n, err := stream.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("the stream over TLS: %v after %q", err, got.String())
		}
	}
	for _, p := range rec.seen() {
		if p != "HTTP/2.0 h2" {
			t.Errorf("a response over %q, want HTTP/2.0 negotiated as h2", p)
		}
	}
	if len(rec.seen()) < 4 {
		t.Errorf("responses %q", rec.seen())
	}

	// /acp, WebSocket, over TLS.
	wsTransport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(wsTransport.CloseIdleConnections)
	opts := bearer(aliceToken)
	opts.HTTPClient = &http.Client{Transport: wsTransport}
	c, _ := dial(t, g.ws+"/acp", opts)
	if !strings.HasPrefix(g.ws, "wss://") {
		t.Fatalf("ws base %s", g.ws)
	}
	sid := c.newSession("")
	if answer, _ := c.call(2, "session/prompt", `{"sessionId":"`+sid+`","prompt":[{"type":"text","text":"hi"}]}`); answer["error"] != nil {
		t.Fatalf("a prompt over wss: %v", answer)
	}
	_ = c.c.Close(websocket.StatusNormalClosure, "")
}
