package acpjson

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The agent's requests by the oracle: DecodePermissionRequest and
// DecodeElicitationRequest from encoding/json's maps, the request's
// members through the generic decoder, the rules the model cannot carry
// (a v2 subject's tool call, an elicitation's mode) written again over
// the maps.

// oraclePermission is DecodePermissionRequest by the oracle.
func oraclePermission(data []byte, v Version) (*acpv2.PermissionRequest, error) {
	obj, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	d := &oracle{version: v}
	req := &acpv2.PermissionRequest{}
	m, in := req.ProtoReflect(), info(mdPermissionRequest)
	if err := d.fill(obj, []string{"subject"}, oracleTarget{m, in}); err != nil {
		return nil, err
	}
	if _, ok := obj["options"].([]any); !ok {
		return nil, &Error{Path: "options", Reason: "want an array of permission options, got " + jsonKind(obj["options"])}
	}
	if req.ToolCall != nil {
		return req, nil
	}
	var member func() error
	switch s := obj["subject"].(type) {
	case nil:
		return req, nil
	case map[string]any:
		if typ, _ := s["type"].(string); typ == "tool_call" {
			if s["toolCall"] == nil {
				return req, nil
			}
			member = func() error { return d.member(m, in, in.byKey["toolCall"], s["toolCall"]) }
		} else {
			member = func() error { return d.member(m, in, in.byKey["subject"], s) }
		}
	default:
		return nil, &Error{Path: "subject", Reason: "want an object, got " + jsonKind(s)}
	}
	if err := member(); err != nil {
		return nil, err
	}
	return req, nil
}

// oracleElicitation is DecodeElicitationRequest by the oracle.
func oracleElicitation(data []byte) (*acpv2.ElicitationRequest, error) {
	obj, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	req := &acpv2.ElicitationRequest{}
	if err := (&oracle{version: V2}).object(obj, req.ProtoReflect()); err != nil {
		return nil, err
	}
	switch mode, _ := obj["mode"].(string); mode {
	case "":
		return nil, &Error{Path: "mode", Reason: "required"}
	case ElicitForm:
		if _, ok := obj["requestedSchema"].(map[string]any); !ok {
			return nil, &Error{Path: "requestedSchema", Reason: "required in form mode"}
		}
		req.Url, req.ElicitationId = "", ""
	case ElicitURL:
		if req.Url == "" || req.ElicitationId == "" {
			return nil, &Error{Path: "url", Reason: "required in url mode"}
		}
		req.RequestedSchema = nil
	default:
		req.Url, req.ElicitationId, req.RequestedSchema = "", "", nil
		rest := map[string]any{}
		for k, v := range obj {
			switch k {
			case "mode", "message", "toolCallId", "_meta", "sessionId", "requestId":
			default:
				rest[k] = v
			}
		}
		if len(rest) > 0 {
			meta := map[string]any{"params": rest}
			if m, ok := obj["_meta"].(map[string]any); ok {
				for k, v := range m {
					if k != "params" {
						meta[k] = v
					}
				}
			}
			req.Meta = toStruct(meta)
		}
	}
	return req, nil
}

// requestSeeds are permission requests and elicitations of every shape
// the tests pin, and near misses.
var requestSeeds = []string{
	`{"sessionId":"s","toolCall":{"toolCallId":"call_001"},"options":[{"optionId":"allow-once","name":"Allow once","kind":"allow_once"},{"optionId":"reject-once","name":"Reject","kind":"reject_once"}]}`,
	`{"sessionId":"s","title":"Allow edit?","subject":{"type":"tool_call","toolCall":{"toolCallId":"c9","title":"Edit","rawInput":null}},"options":[{"optionId":"y","name":"Yes","kind":"_custom_allow"}]}`,
	`{"sessionId":"s","title":"Run?","description":"It cleans.","subject":{"type":"command","command":"rm -rf build","cwd":"/w","toolCallId":"c1","_meta":{"k":1},"shell":"bash"},"options":[],"_meta":{"m":true}}`,
	`{"subject":{"type":"command","command":"ls"},"options":[]}`,
	`{"subject":{"command":"ls","type":"_network","host":"example.com"},"options":[]}`,
	`{"subject":{"type":"command","command":"ls","cwd":"/","cwd":5},"options":[]}`,
	`{"requestId":"r","preview":{"toolCallId":"p"},"future":1,"toolCall":{"toolCallId":"c","kind":null,"content":[]},"options":[{"optionId":"y","hint":"h"}]}`,
	`{"subject":{"type":"command","command":"ls","cwd":"/"},"toolCall":{"toolCallId":"c"},"options":[]}`,
	`{"toolCall":null,"subject":{"toolCall":{"toolCallId":"b","kind":null},"type":"tool_call"},"options":[]}`,
	`{"subject":{"type":"tool_call","toolCall":5},"options":[]}`,
	`{"subject":{"type":"tool_call"},"options":[],"title":null,"description":null,"_meta":null}`,
	`{"title":"a","title":"b","description":"x","description":"y","options":[{"optionId":"1"}],"options":[],"_meta":{"a":1},"_meta":{"b":2}}`,
	`{"subject":"x","options":[]}`,
	`{"title":5,"options":[]}`,
	`{"toolCall":"x","options":[]}`,
	`{"toolCall":{"toolCallId":"c"},"options":[1]}`,
	`{"toolCall":{"toolCallId":"c"},"options":[{"name":"x"}]}`,
	`{"toolCall":{"title":"no id"},"options":[]}`,
	`{"toolCall":{"toolCallId":"c"},"options":null}`,
	`{"toolCall":{"toolCallId":"c"}}`,
	`{"options":[],"toolCall":{"toolCallId":"c","rawInput":` + nested(MaxDepth-1, "1") + `}}`,
	`{"options":[],"toolCall":{"toolCallId":"c","rawInput":` + nested(MaxDepth-2, "1") + `}}`,
	`{"options":[],"subject":{"type":"tool_call","toolCall":{"toolCallId":"c","rawInput":` + nested(MaxDepth-2, "1") + `}}}`,
	`{"options":[],"subject":{"type":"tool_call","toolCall":{"toolCallId":"c","rawInput":` + nested(MaxDepth-3, "1") + `}}}`,
	`{"sessionId":"s","mode":"form","message":"Who?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}},"toolCallId":"c1","_meta":{"k":1},"other":true}`,
	`{"sessionId":"s","mode":"url","message":"Log in","url":"https://example.com/a","elicitationId":"e1","requestedSchema":{"type":"object"}}`,
	`{"mode":"form","message":null,"requestedSchema":{},"url":"https://x","elicitationId":"e"}`,
	`{"sessionId":"s","requestId":"r","mode":"_pick","message":"Pick","toolCallId":"c2","_meta":{"k":1,"params":2},"choices":["a","b"],"url":"https://x","requestedSchema":{"type":"object"}}`,
	`{"mode":"_x","sessionId":"s","url":null,"elicitationId":""}`,
	`{"mode":"url","mode":"form","requestedSchema":{"a":1},"requestedSchema":{"b":2}}`,
	`{"message":"no mode"}`,
	`{"mode":"","requestedSchema":{}}`,
	`{"mode":3}`,
	`{"mode":"form","requestedSchema":[]}`,
	`{"mode":"url","url":"","elicitationId":"e"}`,
	`{"mode":"_x","toolCallId":5}`,
	`[]`,
	`{"mode":"_x"} {}`,
	`{"mode":"_x"`,
}

// checkRequestOracle decodes data as each request, with the decoder and
// with the oracle: both refuse it, or both give the same request.
func checkRequestOracle(t *testing.T, data []byte, v Version) {
	t.Helper()
	same := func(what string, got, want proto.Message, err, werr error) {
		t.Helper()
		if (err == nil) != (werr == nil) {
			t.Fatalf("%s v%d: %s\ndecoder: %v\noracle:  %v", what, v, data, err, werr)
		}
		if err != nil && !semantic(err) {
			t.Fatalf("%s v%d: %s: error %T %v, not an *Error", what, v, data, err, err)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("%s v%d: %s\ndecoder: %v\noracle:  %v", what, v, data, got, want)
		}
	}
	p, err := DecodePermissionRequest(data, v)
	wp, werr := oraclePermission(data, v)
	same("permission request", p, wp, err, werr)
	e, err := DecodeElicitationRequest(data, v)
	we, werr := oracleElicitation(data)
	same("elicitation", e, we, err, werr)
}

func TestRequestsMatchOracle(t *testing.T) {
	t.Parallel()
	for _, s := range requestSeeds {
		for _, v := range []Version{V1, V2} {
			checkRequestOracle(t, []byte(s), v)
		}
	}
}

// FuzzRequestsMatchOracle: the decoder decodes every permission request
// and elicitation as the oracle does, and refuses what it refuses.
func FuzzRequestsMatchOracle(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, ver uint8) {
		checkRequestOracle(t, data, Version(1+ver%2))
	})
}

// The gateway's own fields of the requests are no ACP members: neither
// decoder nor encoder knows them by a name.
func TestGatewayOwnedFields(t *testing.T) {
	t.Parallel()
	for _, fd := range []protoreflect.FieldDescriptor{
		mdPermissionRequest.Fields().ByName("request_id"),
		mdPermissionRequest.Fields().ByName("preview"),
		mdElicitationRequest.Fields().ByName("request_id"),
	} {
		in, tb := info(fd.ContainingMessage()), tableOf(fd.ContainingMessage())
		if _, ok := in.keys[fd.Number()]; ok {
			t.Errorf("%s has an ACP name", fd.FullName())
		}
		for _, e := range tb.entries {
			if e.fd == fd {
				t.Errorf("%s is in the decoder's table", fd.FullName())
			}
		}
	}
}
