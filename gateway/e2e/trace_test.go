package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/telemetry"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// promptMeta runs a turn of an agent that echoes its prompt's _meta, with
// traceparent sent by the client, and returns the _meta the agent got.
func promptMeta(t *testing.T, tr *telemetry.Tracing, traceparent string) map[string]string {
	t.Helper()
	g := startGateway(t, gatewayOpts{
		tracing: tr.Interceptor,
		agents:  map[string][]string{"echo": agentCommand(t, agentsim.Script{ProtocolVersion: 1, EchoMeta: true})},
	})
	id := g.create(t, "echo")
	req := connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: textPrompt("hi")})
	if traceparent != "" {
		req.Header().Set("traceparent", traceparent)
	}
	stream, err := g.connect.Prompt(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for stream.Receive() {
		text := stream.Msg().GetEvent().GetAgentMessageChunk().GetContent().GetText().GetText()
		if js, ok := strings.CutPrefix(text, "_meta: "); ok {
			var meta map[string]string
			if err := json.Unmarshal([]byte(js), &meta); err != nil {
				t.Fatalf("the agent's _meta %q: %v", js, err)
			}
			return meta
		}
	}
	t.Fatalf("the agent did not echo its _meta: %v", stream.Err())
	return nil
}

func TestTraceContextReachesTheAgent(t *testing.T) {
	t.Parallel()
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00f067aa0ba902b7"
		sent    = "00-" + traceID + "-" + parent + "-01"
	)
	t.Run("without export", func(t *testing.T) {
		t.Parallel()
		tr, err := telemetry.New(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		if got := promptMeta(t, tr, sent)["traceparent"]; got != sent {
			t.Fatalf("the agent got traceparent %q, want the client's %q", got, sent)
		}
		if meta := promptMeta(t, tr, ""); meta != nil {
			t.Fatalf("with no trace context the agent got _meta %v", meta)
		}
	})
	t.Run("exporting", func(t *testing.T) {
		t.Parallel()
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer collector.Close()
		tr, err := telemetry.New(context.Background(), collector.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Errorf("shut the tracer down: %v", err)
			}
		}()
		got := promptMeta(t, tr, sent)["traceparent"]
		// The same trace, with the gateway's span as the agent's parent.
		parts := strings.Split(got, "-")
		if len(parts) != 4 || parts[1] != traceID || parts[2] == parent {
			t.Fatalf("the agent got traceparent %q, want trace %s under a span of the gateway's", got, traceID)
		}
	})
}
