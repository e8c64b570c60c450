package console_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/console"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// TestMounted checks the console beside the SessionService on the server's
// mux, mounted at "/" as the binary does: each keeps its own paths.
func TestMounted(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "mount-token-0123456789")
	for _, tc := range []struct {
		path, want string
	}{
		{"/", "<title>acp-gateway console</title>"},
		{console.ConfigPath, `{"agents":["demo"]}`},
		{"/healthz", "ok"},
	} {
		res, err := http.Get(g.base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(b), tc.want) {
			t.Errorf("GET %s = %d %q, want %q", tc.path, res.StatusCode, b, tc.want)
		}
	}
	_, err := g.client.ListSessions(context.Background(), connect.NewRequest(&acpv2.ListSessionsRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("ListSessions without a token: %v, want unauthenticated", err)
	}
	if _, err := g.client.ListSessions(context.Background(), authorized(connect.NewRequest(&acpv2.ListSessionsRequest{}), "mount-token-0123456789")); err != nil {
		t.Errorf("ListSessions: %v", err)
	}
}
