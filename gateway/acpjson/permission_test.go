package acpjson_test

import (
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

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

}

// A v2 request's description and its subject of another type than
// tool_call are typed fields, and the subject is written back as the agent
// sent it.
func TestDecodePermissionRequestV2Subjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		subject string
		want    *acpv2.PermissionSubject
	}{
		{
			subject: `{"type":"command","command":"rm -rf build","cwd":"/w","toolCallId":"c1","_meta":{"k":1},"shell":"bash"}`,
			want: &acpv2.PermissionSubject{Subject: &acpv2.PermissionSubject_Command{Command: &acpv2.CommandSubject{
				Command: "rm -rf build", Cwd: "/w", ToolCallId: proto.String("c1"),
				Meta:  jsonStruct(t, `{"k":1}`),
				Extra: jsonStruct(t, `{"shell":"bash"}`),
			}}},
		},
		{
			subject: `{"type":"command","command":"ls"}`, // no cwd: kept whole
			want:    &acpv2.PermissionSubject{Subject: &acpv2.PermissionSubject_Unknown{Unknown: jsonStruct(t, `{"type":"command","command":"ls"}`)}},
		},
		{
			subject: `{"type":"_network","host":"example.com"}`,
			want:    &acpv2.PermissionSubject{Subject: &acpv2.PermissionSubject_Unknown{Unknown: jsonStruct(t, `{"type":"_network","host":"example.com"}`)}},
		},
	} {
		js := `{"sessionId":"s","title":"Run?","description":"It cleans the build.","subject":` + tc.subject + `,"options":[{"optionId":"y","name":"Yes","kind":"allow_once"}],"_meta":{"m":true}}`
		req, err := acpjson.DecodePermissionRequest([]byte(js), acpjson.V2)
		if err != nil {
			t.Fatal(err)
		}
		if req.GetToolCall() != nil || req.GetDescription() != "It cleans the build." || req.Description == nil {
			t.Fatalf("%s: decoded %v", tc.subject, req)
		}
		if !proto.Equal(req.GetSubject(), tc.want) {
			t.Fatalf("%s: subject %v, want %v", tc.subject, req.GetSubject(), tc.want)
		}
		if !proto.Equal(req.GetMeta(), jsonStruct(t, `{"m":true}`)) {
			t.Fatalf("%s: meta %v, want the agent's _meta alone", tc.subject, req.GetMeta())
		}
		back, err := acpjson.Encode(req.GetSubject(), acpjson.V2)
		if err != nil {
			t.Fatal(err)
		}
		if !testutil.JSONEqual(t, back, []byte(tc.subject)) {
			t.Fatalf("subject written back as %s, want %s", back, tc.subject)
		}
	}
	// No description: absent, not empty.
	req, err := acpjson.DecodePermissionRequest([]byte(`{"sessionId":"s","title":"t","options":[]}`), acpjson.V2)
	if err != nil || req.Description != nil || req.Subject != nil {
		t.Fatalf("decoded %v, %v", req, err)
	}
}

// What the request's members become: the gateway's own fields are not
// taken from the agent, a v1 toolCall is taken before a v2 subject, a
// patch's null is a clear in v2 and unchanged in v1, and members the
// request does not model are dropped but kept in an option's extra.
func TestDecodePermissionRequestMembers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, js string
		v        acpjson.Version
		want     *acpv2.PermissionRequest
	}{
		{
			name: "gateway's fields and unknown members",
			js:   `{"sessionId":"s","requestId":"r","preview":{"toolCallId":"p"},"future":1,"toolCall":{"toolCallId":"c"},"options":[{"optionId":"y","name":"Yes","kind":"allow_once","hint":"h"}]}`,
			v:    acpjson.V1,
			want: &acpv2.PermissionRequest{ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "c"}, Options: []*acpv2.PermissionOption{
				{OptionId: "y", Name: "Yes", Kind: "allow_once", Extra: jsonStruct(t, `{"hint":"h"}`)}}},
		},
		{
			name: "toolCall before subject",
			js:   `{"subject":{"type":"command","command":"ls","cwd":"/"},"toolCall":{"toolCallId":"c"},"options":[]}`,
			v:    acpjson.V2,
			want: &acpv2.PermissionRequest{ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "c"}, Options: []*acpv2.PermissionOption{}},
		},
		{
			name: "toolCall before the subject's",
			js:   `{"toolCall":{"toolCallId":"a"},"subject":{"type":"tool_call","toolCall":{"toolCallId":"b"}},"options":[]}`,
			v:    acpjson.V2,
			want: &acpv2.PermissionRequest{ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "a"}, Options: []*acpv2.PermissionOption{}},
		},
		{
			name: "null toolCall, the subject's taken",
			js:   `{"toolCall":null,"subject":{"toolCall":{"toolCallId":"b","kind":null},"type":"tool_call"},"options":[]}`,
			v:    acpjson.V2,
			want: &acpv2.PermissionRequest{ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "b",
				Kind: &acpv2.StringPatch{Op: &acpv2.StringPatch_Clear{}}}, Options: []*acpv2.PermissionOption{}},
		},
		{
			name: "v1 null is unchanged",
			js:   `{"toolCall":{"toolCallId":"b","kind":null,"title":"T"},"options":[]}`,
			v:    acpjson.V1,
			want: &acpv2.PermissionRequest{ToolCall: &acpv2.ToolCallUpdate{ToolCallId: "b",
				Title: &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "T"}}}, Options: []*acpv2.PermissionOption{}},
		},
		{
			name: "a tool_call subject without its tool call",
			js:   `{"subject":{"type":"tool_call"},"options":[],"title":null,"description":null}`,
			v:    acpjson.V2,
			want: &acpv2.PermissionRequest{Options: []*acpv2.PermissionOption{}},
		},
		{
			name: "last of duplicates",
			js:   `{"title":"a","title":"b","description":"x","description":"y","options":[{"optionId":"1"}],"options":[],"_meta":{"a":1},"_meta":{"b":2}}`,
			v:    acpjson.V2,
			want: &acpv2.PermissionRequest{Title: "b", Description: proto.String("y"), Options: []*acpv2.PermissionOption{}, Meta: jsonStruct(t, `{"b":2}`)},
		},
	} {
		got, err := acpjson.DecodePermissionRequest([]byte(tc.js), tc.v)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		// An empty options list and none are the same to proto.Equal.
		if !proto.Equal(got, tc.want) {
			t.Errorf("%s: got %v\nwant %v", tc.name, got, tc.want)
		}
	}
}

func TestDecodePermissionRequestErrors(t *testing.T) {
	t.Parallel()
	for _, js := range []string{
		`{"toolCall":{"toolCallId":"c"}}`,
		`{"toolCall":{"toolCallId":"c"},"options":[1]}`,
		`{"toolCall":{"toolCallId":"c"},"options":[{"name":"x"}]}`,
		`{"toolCall":{"title":"no id"},"options":[]}`,
		`{"toolCall":{"toolCallId":"c"},"options":null}`,
		`{"toolCall":{"toolCallId":"c"},"options":{}}`,
		`{"subject":{"type":"command","command":"ls","cwd":"/"}}`,
		`{"subject":{"type":"tool_call","toolCall":{}},"options":[]}`,
		`{"toolCall":{"toolCallId":"c"},"options":[]} {}`,
		// Members of the wrong shape, as in every ACP message without extra.
		`{"toolCall":{"toolCallId":"c"},"options":[],"title":5}`,
		`{"toolCall":{"toolCallId":"c"},"options":[],"_meta":"m"}`,
		`{"toolCall":"c","options":[]}`,
		`{"subject":"c","options":[]}`,
		`{"subject":{"type":"tool_call","toolCall":[]},"options":[]}`,
		`[]`,
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

// jsonStruct is the JSON object js as a Struct.
func jsonStruct(t *testing.T, js string) *structpb.Struct {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
