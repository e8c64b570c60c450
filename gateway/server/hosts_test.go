package server_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/server"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// call POSTs a GetSession through client to base with the given Host and
// Origin headers ("": none), and returns the status and the body.
func call(t *testing.T, client *http.Client, base, path, host, origin string) (int, string) {
	t.Helper()
	method, body := http.MethodPost, io.Reader(strings.NewReader(`{"sessionId":"1"}`))
	if !strings.HasPrefix(path, "/acp.v2.") && !strings.HasPrefix(path, "/grpc.") {
		method, body = http.MethodGet, nil
	}
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

const getSession = "/acp.v2.SessionService/GetSession"

// A web page whose name is made to resolve to the gateway (DNS rebinding)
// is refused, whatever its protocol; loopback names and addresses, and
// the configured ones, are served at any port.
func TestHostsOtherThanTheGatewaysAreRefused(t *testing.T) {
	t.Parallel()
	logs := &testutil.SyncBuffer{}
	base := start(t, sized{}, server.Options{
		AllowedHosts: []string{"gw.example.com", "10.1.2.3", "[fd00::1]"},
		Log:          slog.New(slog.NewJSONHandler(logs, nil)),
		Extra:        map[string]http.Handler{"GET /metrics": http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})},
	})
	port := base[strings.LastIndex(base, ":")+1:]
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	clients := map[string]*http.Client{
		"HTTP/1.1": {Transport: &http.Transport{}},
		"h2c":      {Transport: &http.Transport{Protocols: h2c}},
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			status, body := call(t, client, base, getSession, "rebind.attacker.example:"+port, "http://rebind.attacker.example:"+port)
			var e struct{ Code, Message string }
			if err := json.Unmarshal([]byte(body), &e); status != http.StatusForbidden || err != nil || e.Code != "permission_denied" ||
				!strings.Contains(e.Message, "--allowed-host rebind.attacker.example") {
				t.Fatalf("a rebound name: %d %s, want 403 permission_denied naming --allowed-host", status, body)
			}
			for _, host := range []string{
				"rebind.attacker.example", "127.0.0.1.attacker.example:" + port, "localhost.attacker.example:" + port,
				"10.1.2.4:" + port, "[::2]:" + port, "gw.example.com.evil:" + port,
			} {
				if status, _ := call(t, client, base, getSession, host, ""); status != http.StatusForbidden {
					t.Errorf("Host %s: %d, want 403", host, status)
				}
			}
			for _, host := range []string{
				"127.0.0.1:" + port, "localhost:" + port, "LocalHost.:" + port, "[::1]:" + port, "127.3.2.1:1", "localhost",
				"[::ffff:127.0.0.1]:" + port, "gw.example.com", "GW.example.com:443", "10.1.2.3:8080", "[fd00:0::1]:8080",
			} {
				if status, body := call(t, client, base, getSession, host, ""); status != http.StatusOK {
					t.Errorf("Host %s: %d %s, want 200", host, status, body)
				}
			}
			// Probes and scrapes come by any name.
			for _, path := range []string{"/healthz", "/readyz", "/metrics", "/grpc.health.v1.Health/Check"} {
				if status, body := call(t, client, base, path, "10.9.9.9:"+port, ""); status != http.StatusOK {
					t.Errorf("%s with the Host of a pod's address: %d %s, want 200", path, status, body)
				}
			}
		})
	}
	out := logs.String()
	for _, want := range []string{`"msg":"request refused for its Host or Origin"`, `"client":"127.0.0.1:`,
		`"host":"rebind.attacker.example:` + port + `"`, `"origin":"http://rebind.attacker.example:` + port + `"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
}

// A browser's Origin must be the gateway's own (its Host's host and port)
// or a listed CORS origin.
func TestOriginsOtherThanTheGatewaysAreRefused(t *testing.T) {
	t.Parallel()
	base := start(t, sized{}, server.Options{AllowedHosts: []string{"gw.example.com"}, CORSOrigins: []string{"https://app.example.com"}})
	u, _ := url.Parse(base)
	port := u.Port()
	for _, c := range []struct {
		host, origin string
		ok           bool
	}{
		{"", "http://127.0.0.1:" + port, true},
		{"", "https://127.0.0.1:" + port, true},
		{"localhost:" + port, "http://LOCALHOST:" + port, true},
		{"", "https://app.example.com", true},
		{"", "https://APP.example.com", true},
		// Behind a proxy that ends TLS: no port in Host, the scheme's in Origin.
		{"gw.example.com", "https://gw.example.com", true},
		{"gw.example.com", "http://gw.example.com", true},
		{"gw.example.com:443", "https://gw.example.com", true},
		{"", "http://localhost:" + port, false}, // another name than the Host's
		{"", "http://127.0.0.1:1", false},       // another port of the same host
		{"", "http://127.0.0.1", false},
		{"gw.example.com", "https://gw.example.com:8443", false},
		{"", "https://evil.example.com", false},
		{"", "null", false},
		{"", "file://", false},
		{"", "127.0.0.1:" + port, false},
	} {
		status, body := call(t, http.DefaultClient, base, getSession, c.host, c.origin)
		if ok := status == http.StatusOK; ok != c.ok || (!ok && status != http.StatusForbidden) {
			t.Errorf("Host %q, Origin %q: %d %s", c.host, c.origin, status, body)
		}
	}
	// A preflight from a foreign origin is refused too.
	req, _ := http.NewRequest(http.MethodOptions, base+getSession, nil)
	req.Header.Set("Origin", "https://evil.example.com")
	req.Header.Set("Access-Control-Request-Method", "POST")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("a foreign preflight: %s, Access-Control-Allow-Origin %q", res.Status, res.Header.Get("Access-Control-Allow-Origin"))
	}
}

func TestAnyHostTurnsTheHostCheckOff(t *testing.T) {
	t.Parallel()
	base := start(t, sized{}, server.Options{AllowedHosts: []string{server.AnyHost}})
	if status, body := call(t, http.DefaultClient, base, getSession, "anything.example:1", ""); status != http.StatusOK {
		t.Fatalf("any Host: %d %s", status, body)
	}
	if status, _ := call(t, http.DefaultClient, base, getSession, "anything.example:1", "https://evil.example.com"); status != http.StatusForbidden {
		t.Fatalf("a foreign Origin with any Host allowed: %d, want 403", status)
	}
}

func TestCheckAllowedHost(t *testing.T) {
	t.Parallel()
	for h, ok := range map[string]bool{
		"gw.example.com": true, "10.0.0.1": true, "[fd00::1]": true, "fd00::1": true, "*": true,
		"gw.example.com:8080": false, "[::1]:80": false, "": false, "http://gw.example.com": false, "a b": false,
	} {
		if err := server.CheckAllowedHost(h); (err == nil) != ok {
			t.Errorf("CheckAllowedHost(%q) = %v", h, err)
		}
	}
}

// What a refused client sent is logged, and told back to it, clipped (its
// Host and Origin may take up to a megabyte each), and the refusals are
// logged at most once every 10 seconds: anyone can be refused, as often as
// they like, and is not to fill the log.
func TestRefusalsAreClippedAndSpaced(t *testing.T) {
	t.Parallel()
	logs := &testutil.SyncBuffer{}
	base := start(t, sized{}, server.Options{Log: slog.New(slog.NewJSONHandler(logs, nil))})
	long := strings.Repeat("a", 200<<10)
	for i := range 20 {
		host, origin := "localhost", "http://"+long+".example"
		if i%2 == 0 {
			host, origin = long+".example", ""
		}
		status, body := call(t, http.DefaultClient, base, getSession, host, origin)
		if status != http.StatusForbidden || len(body) > 1024 || !strings.Contains(body, "aaa…") {
			t.Fatalf("a refusal: %d, %d bytes: %.300s…, want 403 in less than 1 KiB, clipped with …", status, len(body), body)
		}
	}
	out := logs.String()
	if lines := strings.Count(out, "\n"); lines != 1 || len(out) > 1024 ||
		!strings.Contains(out, `"msg":"request refused for its Host or Origin"`) || !strings.Contains(out, `aaa…","origin":"","method":"POST","path":"/acp.v2.SessionService/GetSession","refused":1}`) {
		t.Errorf("20 refusals logged in %d lines, %d bytes, want one of less than 1 KiB:\n%.2000s", lines, len(out), out)
	}
}
