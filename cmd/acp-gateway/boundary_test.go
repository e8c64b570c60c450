package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

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
