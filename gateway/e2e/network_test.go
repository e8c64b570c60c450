package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/gzipbomb"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// This file attacks the gateway's network boundary: what a client that
// holds no token, or holds connections, can make it spend.

// heapAllocated is how many bytes the process has allocated on its heap
// since it started.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// refusedStatus is the HTTP status of the gateway's refusal of each kind
// of bomb (gzipbomb.Kinds, by name): a Connect unary call's error has its
// own; gRPC and Connect streams answer 200 and say so in the trailers or
// the end-of-stream message.
var refusedStatus = map[string]int{"Connect unary": http.StatusUnauthorized, "gRPC unary": http.StatusOK, "Connect stream": http.StatusOK}

// TestUnauthenticatedBombsAreNotRead sends, without a token, 50 requests
// at once whose bodies inflate to 1 GiB each, over Connect, gRPC and a
// stream: the gateway refuses them before reading their bodies, so they
// cost it next to no memory. (connect-go reads, and inflates up to the
// request limit, a unary request before its interceptors run: behind the
// auth interceptor alone these took hundreds of MiB.) It runs alone, not
// in parallel, for its count of the process's allocations to be the
// gateway's and its clients'.
func TestUnauthenticatedBombsAreNotRead(t *testing.T) {
	const n, limit = 50, 64 << 20
	logs := &testutil.SyncBuffer{}
	// No throttle: these bombs carry a wrong token, and past the
	// throttle's limit they would be refused before authentication, which
	// is not what this measures.
	g := startGateway(t, gatewayOpts{auth: tokenFile(t, "tok-alice-0123456789 alice"), anyCwd: true, log: logs, authFailureLimit: -1})
	bomb := testutil.GzipZeros(t, 1024)
	enveloped := testutil.Envelope(1, bomb)
	h1 := &http.Transport{MaxConnsPerHost: n}
	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{Protocols: h2}
	t.Cleanup(h1.CloseIdleConnections)
	t.Cleanup(h2c.CloseIdleConnections)
	send := func(k gzipbomb.Kind, token string) error {
		req, err := k.NewRequest(context.Background(), g.base, bomb, enveloped, token)
		if err != nil {
			return err
		}
		tr := h1
		if k.H2C {
			tr = h2c
		}
		res, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return err
		}
		if res.StatusCode != refusedStatus[k.Name] || gzipbomb.Refusal(res, b) != "unauthenticated" {
			return fmt.Errorf("%s, grpc-status %q %q, %.200s: not refused as unauthenticated",
				res.Status, res.Header.Get("Grpc-Status"), res.Trailer.Get("Grpc-Status"), b)
		}
		return nil
	}
	// One of each first, for what is made once (connections, pools).
	for _, k := range gzipbomb.Kinds {
		if err := send(k, "tok-wrong"); err != nil {
			t.Fatalf("%s: %v", k.Name, err)
		}
	}
	before := heapAllocated()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			token := ""
			if i%2 == 0 {
				token = "tok-wrong"
			}
			k := gzipbomb.Kinds[i%len(gzipbomb.Kinds)]
			if err := send(k, token); err != nil {
				errs[i] = fmt.Errorf("%s: %w", k.Name, err)
			}
		})
	}
	wg.Wait()
	spent := heapAllocated() - before
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("%d unauthenticated bombs: %.1f MiB allocated", n, float64(spent)/(1<<20))
	if spent > limit {
		t.Errorf("%d unauthenticated bombs made the process allocate %d MiB, want less than %d MiB", n, spent>>20, limit>>20)
	}
	// The refusals are in the access log, with the client's address.
	if want := `"msg":"rpc","procedure":"/acp.v2.SessionService/Prompt","user":"","code":"unauthenticated","client":"127.0.0.1:`; !strings.Contains(logs.String(), want) {
		t.Errorf("the log lacks %s", want)
	}
}
