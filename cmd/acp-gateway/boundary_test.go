package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// hostStatus GETs base's console page with the given Host header.
func hostStatus(t *testing.T, base, host string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// serve answers to loopback names, its --listen and --advertise hosts and
// --allowed-host, at any port, and to no other name.
func TestServeAnswersOnlyToItsNames(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addr, exited := startServe(t, ctx, "--advertise", "http://replica-1.internal:8080", "--allowed-host", "gw.example.com")
	base := "http://" + addr
	for host, want := range map[string]int{
		addr: http.StatusOK, "localhost": http.StatusOK, "gw.example.com": http.StatusOK, "GW.example.com:443": http.StatusOK,
		"replica-1.internal:8080": http.StatusOK, "rebind.attacker.example:8080": http.StatusForbidden, "gw.example.org": http.StatusForbidden,
	} {
		if got := hostStatus(t, base, host); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	stopServe(t, cancel, exited)
}

// --insecure-no-auth lets serve listen on every interface without
// authentication, and says so; --allowed-host * is said too.
func TestInsecureChoicesAreLogged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testutil.SyncBuffer{}
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--listen", "0.0.0.0:0", "--store", "memory:", "--insecure-no-auth", "--allowed-host", "*"}, logs, io.Discard)
	}()
	testutil.WaitFor(t, "the serving line", func() bool { return strings.Contains(logs.String(), `"msg":"serving"`) })
	out := logs.String()
	for _, want := range []string{`"level":"WARN","msg":"serving without authentication on an address other machines may reach (--insecure-no-auth)`,
		`"level":"WARN","msg":"--allowed-host *: any Host is accepted`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	stopServe(t, cancel, exited)
}

// The connection flags reach the server: one connection at most, closed
// when idle, its request's body cut when slow.
func TestConnectionFlags(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addr, exited := startServe(t, ctx, "--max-connections", "1", "--conn-idle-timeout", "200ms", "--request-body-timeout", "200ms")
	read := func(c net.Conn) string {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("the connection is still open: %v", err)
		}
		return string(b)
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := dial()
	fmt.Fprintf(held, "POST /acp.v2.SessionService/ListSessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{")
	// A second connection is closed at once, and the first one's slow
	// body is cut.
	if got := read(dial()); got != "" {
		t.Errorf("a connection past --max-connections 1 got %q", got)
	}
	if got := read(held); !strings.Contains(got, "took more than 200ms to arrive") {
		t.Errorf("a slow body: %q", got)
	}
	// An idle connection is closed.
	idle := dial()
	fmt.Fprint(idle, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if got := read(idle); !strings.HasPrefix(got, "HTTP/1.1 200 OK") {
		t.Errorf("GET /healthz, then idle: %q", got)
	}
	stopServe(t, cancel, exited)
}

// --insecure-no-auth is warned of only where other machines may reach the
// gateway; on a loopback address it is said to change nothing.
func TestInsecureNoAuthIsWarnedOfOnlyWhereReachable(t *testing.T) {
	t.Parallel()
	for addr, reachable := range map[string]bool{
		"0.0.0.0:8080": true, "[::]:8080": true, "192.0.2.1:8080": true,
		"127.0.0.1:8080": false, "127.0.0.2:8080": false, "[::1]:8080": false,
	} {
		logs := &testutil.SyncBuffer{}
		cfg := &serveConfig{insecureNoAuth: true}
		cfg.warnBoundary(slog.New(slog.NewJSONHandler(logs, nil)), addr)
		warned := strings.Contains(logs.String(), `"level":"WARN","msg":"serving without authentication on an address other machines may reach`)
		saidNoEffect := strings.Contains(logs.String(), `"level":"INFO","msg":"--insecure-no-auth has no effect`)
		if warned != reachable || saidNoEffect == reachable {
			t.Errorf("--insecure-no-auth on %s: warned %v, said it has no effect %v; want the warning %v:\n%s", addr, warned, saidNoEffect, reachable, logs)
		}
	}
	// Without the flag nothing is said of it.
	logs := &testutil.SyncBuffer{}
	(&serveConfig{}).warnBoundary(slog.New(slog.NewJSONHandler(logs, nil)), "127.0.0.1:8080")
	if strings.Contains(logs.String(), "insecure-no-auth") || strings.Contains(logs.String(), "without authentication") {
		t.Errorf("no --insecure-no-auth: %s", logs)
	}
}
