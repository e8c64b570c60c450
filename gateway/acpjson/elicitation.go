package acpjson

import (
	"unsafe"

	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Elicitation modes and actions (ACP `elicitation/create`), the same in
// ACP v1 and v2.
const (
	ElicitForm    = "form"
	ElicitURL     = "url"
	ElicitAccept  = "accept"
	ElicitDecline = "decline"
	ElicitCancel  = "cancel"
)

// DecodeElicitationRequest decodes the params of an agent's
// `elicitation/create` request into an ElicitationRequest (without its
// request id, which the gateway fills in). The shape is the same in ACP v1
// and v2: a `mode`, a `message`, and for `form` a `requestedSchema` object,
// for `url` an `elicitationId` and a `url`; the members of the other mode
// are dropped. A custom or future mode is kept as it came, its other
// members (those of the known modes included) in `meta` under "params",
// so that nothing is lost. Members are decoded as every ACP message's are:
// null is the same as omitted, and a member of the wrong shape is an
// error.
func DecodeElicitationRequest(data []byte, _ Version) (*acpv2.ElicitationRequest, error) {
	req, err := decodeElicitationRequest(data)
	if err != nil {
		return nil, docError(data, err)
	}
	return req, nil
}

func decodeElicitationRequest(data []byte) (*acpv2.ElicitationRequest, error) {
	r := getReader(data, MaxDepth)
	defer putReader(r)
	req := &acpv2.ElicitationRequest{}
	if err := (decoder{version: V2}).document(r, tableOf(mdElicitationRequest), unsafe.Pointer(req)); err != nil {
		return nil, err
	}
	switch req.Mode {
	case ElicitForm:
		if req.RequestedSchema == nil {
			return nil, &Error{Path: "requestedSchema", Reason: "required in form mode"}
		}
		req.Url, req.ElicitationId = "", ""
	case ElicitURL:
		if req.Url == "" {
			return nil, &Error{Path: "url", Reason: "required in url mode"}
		}
		if req.ElicitationId == "" {
			return nil, &Error{Path: "elicitationId", Reason: "required in url mode"}
		}
		req.RequestedSchema = nil
	default:
		req.Url, req.ElicitationId, req.RequestedSchema = "", "", nil
		// The other members, as the agent sent them, from the object again.
		rest, err := r.structOf(data, 0)
		if err != nil {
			return nil, err
		}
		for _, k := range []string{"mode", "message", "toolCallId", "_meta", "sessionId", "requestId"} {
			delete(rest.Fields, k)
		}
		if len(rest.Fields) > 0 {
			if req.Meta == nil {
				req.Meta = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			}
			req.Meta.Fields["params"] = structpb.NewStructValue(rest)
		}
	}
	return req, nil
}

// DecodeElicitationComplete returns the `elicitationId` of the params of
// an agent's `elicitation/complete` notification.
func DecodeElicitationComplete(data []byte) (string, error) {
	var c acpv2.ElicitationComplete
	if err := Decode(data, &c, V2); err != nil {
		return "", err
	}
	return c.GetElicitationId(), nil
}

// EncodeElicitationResponse encodes the result of an `elicitation/create`
// request for res: `{"action":"accept","content":{...}}`,
// `{"action":"decline"}` or `{"action":"cancel"}`.
func EncodeElicitationResponse(res *acpv2.ElicitationResolved) []byte {
	e := encoder{version: V2}
	e.buf.WriteString(`{"action":`)
	e.str(res.GetAction())
	if c := res.GetContent(); c != nil && res.GetAction() == ElicitAccept {
		e.buf.WriteString(`,"content":`)
		e.value(structpb.NewStructValue(c))
	}
	e.buf.WriteByte('}')
	return e.buf.Bytes()
}
