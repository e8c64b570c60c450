package acpjson_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

func TestDecodePermissionRequestV1(t *testing.T) {
	t.Parallel()
	// The request of seeds/001 "Requesting Permission".
	js := `{"sessionId":"sess_abc123def456","toolCall":{"toolCallId":"call_001"},"options":[{"optionId":"allow-once","name":"Allow once","kind":"allow_once"},{"optionId":"reject-once","name":"Reject","kind":"reject_once"}]}`
	req, err := acpjson.DecodePermissionRequest([]byte(js), acpjson.V1)
	if err != nil {
		t.Fatal(err)
	}
	want := &acpv2.PermissionRequest{
		ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "call_001"},
		Options: []*acpv2.PermissionOption{
			{OptionId: "allow-once", Name: "Allow once", Kind: "allow_once"},
			{OptionId: "reject-once", Name: "Reject", Kind: "reject_once"},
		},
	}
	if !proto.Equal(req, want) {
		t.Fatalf("got %v\nwant %v", req, want)
	}
}

func TestDecodePermissionRequestV2(t *testing.T) {
	t.Parallel()
	js := `{"sessionId":"s","title":"Allow edit?","subject":{"type":"tool_call","toolCall":{"toolCallId":"c9","title":"Edit","rawInput":null}},"options":[{"optionId":"y","name":"Yes","kind":"_custom_allow"}]}`
	req, err := acpjson.DecodePermissionRequest([]byte(js), acpjson.V2)
	if err != nil {
		t.Fatal(err)
	}
	if req.GetTitle() != "Allow edit?" || req.GetToolCall().GetToolCallId() != "c9" ||
		req.GetToolCall().GetTitle().GetValue() != "Edit" || req.GetToolCall().GetRawInput().GetValue() != nil || req.GetToolCall().GetRawInput() == nil {
		t.Fatalf("decoded %v", req)
	}
	if req.GetOptions()[0].GetKind() != "_custom_allow" {
		t.Fatalf("custom option kind lost: %v", req.GetOptions())
	}

	cmd := `{"sessionId":"s","title":"Run?","subject":{"type":"command","command":"rm -rf build","cwd":"/w"},"options":[{"optionId":"y","name":"Yes","kind":"allow_once"}]}`
	req, err = acpjson.DecodePermissionRequest([]byte(cmd), acpjson.V2)
	if err != nil {
		t.Fatal(err)
	}
	if req.GetToolCall() != nil || req.GetMeta().GetFields()["subject"].GetStructValue().GetFields()["command"].GetStringValue() != "rm -rf build" {
		t.Fatalf("command subject not kept: %v", req)
	}
}

func TestDecodePermissionRequestErrors(t *testing.T) {
	t.Parallel()
	for _, js := range []string{
		`{"toolCall":{"toolCallId":"c"}}`,
		`{"toolCall":{"toolCallId":"c"},"options":[1]}`,
		`{"toolCall":{"toolCallId":"c"},"options":[{"name":"x"}]}`,
		`{"toolCall":{"title":"no id"},"options":[]}`,
	} {
		var e *acpjson.Error
		if _, err := acpjson.DecodePermissionRequest([]byte(js), acpjson.V1); !errors.As(err, &e) {
			t.Errorf("%s: err = %v, want *acpjson.Error", js, err)
		}
	}
}

func TestEncodePermissionResponse(t *testing.T) {
	t.Parallel()
	got := acpjson.EncodePermissionResponse(&acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_SelectedOptionId{SelectedOptionId: "allow-once"}})
	if !testutil.JSONEqual(t, got, []byte(`{"outcome":{"outcome":"selected","optionId":"allow-once"}}`)) {
		t.Fatalf("got %s", got)
	}
	got = acpjson.EncodePermissionResponse(&acpv2.PermissionOutcome{Outcome: &acpv2.PermissionOutcome_Cancelled{Cancelled: true}})
	if !testutil.JSONEqual(t, got, []byte(`{"outcome":{"outcome":"cancelled"}}`)) {
		t.Fatalf("got %s", got)
	}
}

func TestContentBlockRoundTrip(t *testing.T) {
	t.Parallel()
	// Prompts travel from clients as proto and to agents as ACP JSON.
	in := []byte(`{"type":"resource_link","name":"a","uri":"file:///a","size":3}`)
	var cb acpv2.ContentBlock
	if err := acpjson.Decode(in, &cb, acpjson.V2); err != nil {
		t.Fatal(err)
	}
	if cb.GetResourceLink().GetSize() != 3 {
		t.Fatalf("decoded %v", &cb)
	}
	out, err := acpjson.Encode(&cb, acpjson.V2)
	if err != nil {
		t.Fatal(err)
	}
	if !testutil.JSONEqual(t, out, in) {
		t.Fatalf("got %s", out)
	}
}
