package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

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

// bombRequest is a request carrying a compressed body in one of the
// protocols' ways, and how the gateway's refusal of it reads.
type bombRequest struct {
	name, method, contentType string
	header                    map[string]string
	enveloped                 bool
	h2c                       bool
	// refused reports whether the response is an unauthenticated error.
	refused func(res *http.Response, body []byte) bool
}

var bombRequests = []bombRequest{
	{name: "Connect unary", method: "CreateSession", contentType: "application/proto",
		header: map[string]string{"Content-Encoding": "gzip", "Connect-Protocol-Version": "1"},
		refused: func(res *http.Response, body []byte) bool {
			return res.StatusCode == http.StatusUnauthorized && bytes.Contains(body, []byte(`"code":"unauthenticated"`))
		}},
	{name: "gRPC unary", method: "GetSession", contentType: "application/grpc", h2c: true, enveloped: true,
		header: map[string]string{"Grpc-Encoding": "gzip", "Te": "trailers"},
		refused: func(res *http.Response, _ []byte) bool {
			return res.Trailer.Get("Grpc-Status") == "16" || res.Header.Get("Grpc-Status") == "16"
		}},
	{name: "Connect stream", method: "Prompt", contentType: "application/connect+proto", enveloped: true,
		header: map[string]string{"Connect-Content-Encoding": "gzip"},
		refused: func(res *http.Response, body []byte) bool {
			return res.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"code":"unauthenticated"`))
		}},
}

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
	send := func(r bombRequest, token string) error {
		body := bomb
		if r.enveloped {
			body = enveloped
		}
		req, err := http.NewRequest(http.MethodPost, g.base+"/acp.v2.SessionService/"+r.method, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", r.contentType)
		for k, v := range r.header {
			req.Header.Set(k, v)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		tr := h1
		if r.h2c {
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
		if !r.refused(res, b) {
			return fmt.Errorf("%s, grpc-status %q %q, %.200s: not refused as unauthenticated",
				res.Status, res.Header.Get("Grpc-Status"), res.Trailer.Get("Grpc-Status"), b)
		}
		return nil
	}
	// One of each first, for what is made once (connections, pools).
	for _, r := range bombRequests {
		if err := send(r, "tok-wrong"); err != nil {
			t.Fatalf("%s: %v", r.name, err)
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
			r := bombRequests[i%len(bombRequests)]
			if err := send(r, token); err != nil {
				errs[i] = fmt.Errorf("%s: %w", r.name, err)
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
