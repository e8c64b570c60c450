package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
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
	req, _ := http.NewRequest(http.MethodPost, base+procedure, bytes.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
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
