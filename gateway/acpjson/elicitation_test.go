package acpjson_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

func TestDecodeElicitationRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, js string
		want     *acpv2.ElicitationRequest
	}{
		{
			name: "form",
			js:   `{"sessionId":"s","mode":"form","message":"Who?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}},"toolCallId":"c1","_meta":{"k":1},"other":true}`,
			want: &acpv2.ElicitationRequest{
				Mode: "form", Message: "Who?", ToolCallId: "c1",
				RequestedSchema: jsonStruct(t, `{"type":"object","properties":{"name":{"type":"string"}}}`),
				Meta:            jsonStruct(t, `{"k":1}`),
			},
		},
		{
			// The members of the other mode are not the request's.
			name: "url",
			js:   `{"sessionId":"s","mode":"url","message":"Log in","url":"https://example.com/a","elicitationId":"e1","requestedSchema":{"type":"object"}}`,
			want: &acpv2.ElicitationRequest{Mode: "url", Message: "Log in", Url: "https://example.com/a", ElicitationId: "e1"},
		},
		{
			name: "form without message",
			js:   `{"mode":"form","message":null,"requestedSchema":{},"url":"https://x","elicitationId":"e"}`,
			want: &acpv2.ElicitationRequest{Mode: "form", RequestedSchema: jsonStruct(t, `{}`)},
		},
		{
			// A custom mode keeps its other members, those of the known
			// modes included, in meta.params, beside the agent's _meta.
			name: "custom",
			js:   `{"sessionId":"s","requestId":"r","mode":"_pick","message":"Pick","toolCallId":"c2","_meta":{"k":1},"choices":["a","b"],"url":"https://x","requestedSchema":{"type":"object"}}`,
			want: &acpv2.ElicitationRequest{
				Mode: "_pick", Message: "Pick", ToolCallId: "c2",
				Meta: jsonStruct(t, `{"k":1,"params":{"choices":["a","b"],"url":"https://x","requestedSchema":{"type":"object"}}}`),
			},
		},
		{
			name: "custom with nothing else",
			js:   `{"mode":"_x","sessionId":"s"}`,
			want: &acpv2.ElicitationRequest{Mode: "_x"},
		},
		{
			name: "last of duplicates",
			js:   `{"mode":"url","mode":"form","requestedSchema":{"a":1},"requestedSchema":{"b":2}}`,
			want: &acpv2.ElicitationRequest{Mode: "form", RequestedSchema: jsonStruct(t, `{"b":2}`)},
		},
	} {
		got, err := acpjson.DecodeElicitationRequest([]byte(tc.js), acpjson.V2)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !proto.Equal(got, tc.want) {
			t.Errorf("%s: got %v\nwant %v", tc.name, got, tc.want)
		}
	}
}

func TestDecodeElicitationRequestErrors(t *testing.T) {
	t.Parallel()
	for _, js := range []string{
		`{"message":"no mode"}`,
		`{"mode":"","requestedSchema":{}}`,
		`{"mode":3}`,
		`{"mode":"form","message":"no schema"}`,
		`{"mode":"form","requestedSchema":[]}`,
		`{"mode":"form","message":3,"requestedSchema":{}}`,
		`{"mode":"url","message":"no url","elicitationId":"e"}`,
		`{"mode":"url","url":"","elicitationId":"e"}`,
		`{"mode":"url","url":"https://x","message":"no id"}`,
		`{"mode":"_x","message":{}}`,
		`{"mode":"form","requestedSchema":{},"toolCallId":5}`,
		`{"mode":"form","requestedSchema":{},"_meta":[]}`,
		`{"mode":"_x","url":5}`,
		`[]`,
		`{"mode":"_x"} {}`,
		`{"mode":"_x"`,
	} {
		var e *acpjson.Error
		if _, err := acpjson.DecodeElicitationRequest([]byte(js), acpjson.V2); !errors.As(err, &e) {
			t.Errorf("%s: err = %v, want *acpjson.Error", js, err)
		}
	}
}

func TestDecodeElicitationComplete(t *testing.T) {
	t.Parallel()
	id, err := acpjson.DecodeElicitationComplete([]byte(`{"sessionId":"s","elicitationId":"e1","_meta":{}}`))
	if err != nil || id != "e1" {
		t.Fatalf("got %q, %v", id, err)
	}
	for _, js := range []string{`{}`, `{"elicitationId":""}`, `{"elicitationId":3}`, `"e1"`, `{"elicitationId":"e1"`} {
		var e *acpjson.Error
		if _, err := acpjson.DecodeElicitationComplete([]byte(js)); !errors.As(err, &e) {
			t.Errorf("%s: err = %v, want *acpjson.Error", js, err)
		}
	}
}
