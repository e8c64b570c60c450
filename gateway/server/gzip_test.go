package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"runtime/metrics"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/server"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// post sends body to procedure with the given headers and returns the
// status and the Connect error's code and message: the unary body's, or
// the stream's end message's.
func post(t *testing.T, base, procedure string, body []byte, header ...string) (status int, code, message string) {
	t.Helper()
	return postVia(t, &http.Transport{DisableCompression: true}, base, procedure, body, header...)
}

// postVia is post through rt.
func postVia(t *testing.T, rt http.RoundTripper, base, procedure string, body []byte, header ...string) (status int, code, message string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+procedure, bytes.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e struct {
		Code, Message string
		Error         *struct{ Code, Message string }
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/connect") {
		for {
			flags, data, err := testutil.ReadEnvelope(res.Body)
			if err != nil {
				t.Fatalf("%s: %v", procedure, err)
			}
			if flags&2 != 0 {
				if flags&1 != 0 { // compressed, in the request's encoding
					zr, err := gzip.NewReader(bytes.NewReader(data))
					if err != nil {
						t.Fatalf("%s: %v", procedure, err)
					}
					data, _ = io.ReadAll(zr)
				}
				_ = json.Unmarshal(data, &e)
				break
			}
		}
		if e.Error != nil {
			e.Code, e.Message = e.Error.Code, e.Error.Message
		}
	} else if b, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK {
		_ = json.Unmarshal(b, &e)
	}
	return res.StatusCode, e.Code, e.Message
}

// A compressed message is inflated no further than the request limit: a
// bomb whose end is broken is refused as too large without its end being
// reached (connect-go inflated it all to tell its size, and told of the
// broken end). A compressed message within the limit is served.
func TestCompressedRequestsAreInflatedOnlyToTheLimit(t *testing.T) {
	t.Parallel()
	base := start(t, holding{}, server.Options{})
	// 64 MiB of zeros, then bytes that are no gzip member.
	bomb := append(testutil.GzipZeros(t, 64), "not a gzip member"...)
	for _, c := range []struct {
		name, procedure string
		body            []byte
		header          []string
	}{
		{"unary", acpv2connect.SessionServiceGetSessionProcedure, bomb,
			[]string{"Content-Type", "application/proto", "Content-Encoding", "gzip"}},
		{"stream", acpv2connect.SessionServiceWatchProcedure, testutil.Envelope(1, bomb),
			[]string{"Content-Type", "application/connect+proto", "Connect-Content-Encoding", "gzip"}},
	} {
		_, code, message := post(t, base, c.procedure, c.body, c.header...)
		if code != "resource_exhausted" || !strings.Contains(message, "larger than configured max") || strings.Contains(message, "invalid header") {
			t.Errorf("%s: %s %q, want resource_exhausted without reaching the end of the bomb", c.name, code, message)
		}
	}
	msg, _ := proto.Marshal(&acpv2.GetSessionRequest{SessionId: strings.Repeat("s", 100)})
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write(msg)
	_ = zw.Close()
	if status, code, message := post(t, base, acpv2connect.SessionServiceGetSessionProcedure, zipped.Bytes(),
		"Content-Type", "application/proto", "Content-Encoding", "gzip"); status != http.StatusOK {
		t.Errorf("a small compressed request: %d %s %q", status, code, message)
	}
}

// gRPC health and reflection, which anyone may call (health by any Host),
// read a few KiB of a request and inflate no more: a gzip bomb, large or
// small, is refused as too large at a cost of next to nothing (connect-go,
// unbounded by default, read and inflated a whole 256 MiB one into
// memory). It runs alone, not in parallel, for its count of the process's
// allocations to be its own.
func TestHealthAndReflectionReadLittle(t *testing.T) {
	base := start(t, acpv2connect.UnimplementedSessionServiceHandler{}, server.Options{})
	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{Protocols: h2, DisableCompression: true}
	t.Cleanup(h2c.CloseIdleConnections)
	// 256 MiB of zeros, 256 KiB compressed; and 2 MiB, 2 KiB compressed
	// (within the read limit), whose end is broken.
	large := testutil.GzipZeros(t, 256)
	var zeros bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zeros, gzip.BestCompression)
	_, _ = zw.Write(make([]byte, 2<<20))
	_ = zw.Close()
	small := append(zeros.Bytes(), "not a gzip member"...)
	type request struct {
		name, procedure string
		rt              http.RoundTripper
		body            []byte
		header          []string
	}
	var requests []request
	for _, bomb := range []struct {
		name string
		body []byte
	}{{"large", large}, {"small", small}} {
		requests = append(requests, request{"health, " + bomb.name, "/grpc.health.v1.Health/Check", http.DefaultTransport, bomb.body,
			[]string{"Content-Type", "application/proto", "Content-Encoding", "gzip"}})
		for _, version := range []string{"v1", "v1alpha"} {
			requests = append(requests, request{"reflection " + version + ", " + bomb.name,
				"/grpc.reflection." + version + ".ServerReflection/ServerReflectionInfo", h2c, testutil.Envelope(1, bomb.body),
				[]string{"Content-Type", "application/connect+proto", "Connect-Content-Encoding", "gzip"}})
		}
	}
	// One of each first, for what is made once (connections, pools).
	for _, r := range requests {
		postVia(t, r.rt, base, r.procedure, r.body, r.header...)
	}
	before := heapAllocated()
	for _, r := range requests {
		_, code, message := postVia(t, r.rt, base, r.procedure, r.body, r.header...)
		if code != "resource_exhausted" || !strings.Contains(message, "larger than configured max 4096") || strings.Contains(message, "invalid header") {
			t.Errorf("%s: %s %q, want resource_exhausted past 4096 bytes, without reaching the bomb's end", r.name, code, message)
		}
	}
	const limit = 16 << 20
	spent := heapAllocated() - before
	t.Logf("%d gzip bombs: %.1f MiB allocated", len(requests), float64(spent)/(1<<20))
	if spent > limit {
		t.Errorf("%d gzip bombs made the process allocate %d MiB, want less than %d MiB", len(requests), spent>>20, limit>>20)
	}
}

// heapAllocated is the bytes the process has allocated on its heap so far.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
