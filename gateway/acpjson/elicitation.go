package acpjson

import (
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
// for `url` an `elicitationId` and a `url`. A custom or future mode is kept
// as it came, its other members in `meta` under "params", so that nothing
// is lost.
func DecodeElicitationRequest(data []byte, _ Version) (*acpv2.ElicitationRequest, error) {
	obj, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	req := &acpv2.ElicitationRequest{}
	mode, ok := obj["mode"].(string)
	if !ok || mode == "" {
		return nil, &Error{Path: "mode", Reason: "want a string, got " + jsonKind(obj["mode"])}
	}
	req.Mode = mode
	if obj["message"] != nil {
		if req.Message, ok = obj["message"].(string); !ok {
			return nil, &Error{Path: "message", Reason: "want a string, got " + jsonKind(obj["message"])}
		}
	}
	if tc, ok := obj["toolCallId"].(string); ok {
		req.ToolCallId = tc
	}
	meta, _ := obj["_meta"].(map[string]any)
	switch mode {
	case ElicitForm:
		schema, ok := obj["requestedSchema"].(map[string]any)
		if !ok {
			return nil, &Error{Path: "requestedSchema", Reason: "want an object, got " + jsonKind(obj["requestedSchema"])}
		}
		req.RequestedSchema = toStruct(schema)
	case ElicitURL:
		if req.Url, ok = obj["url"].(string); !ok || req.Url == "" {
			return nil, &Error{Path: "url", Reason: "want a string, got " + jsonKind(obj["url"])}
		}
		if req.ElicitationId, ok = obj["elicitationId"].(string); !ok || req.ElicitationId == "" {
			return nil, &Error{Path: "elicitationId", Reason: "want a string, got " + jsonKind(obj["elicitationId"])}
		}
	default:
		rest := map[string]any{}
		for k, v := range obj {
			switch k {
			case "mode", "message", "toolCallId", "_meta", "sessionId", "requestId":
			default:
				rest[k] = v
			}
		}
		if len(rest) > 0 {
			if meta == nil {
				meta = map[string]any{}
			}
			meta["params"] = rest
		}
	}
	if meta != nil {
		req.Meta = toStruct(meta)
	}
	return req, nil
}

// DecodeElicitationComplete returns the `elicitationId` of the params of
// an agent's `elicitation/complete` notification.
func DecodeElicitationComplete(data []byte) (string, error) {
	obj, err := parseObject(data)
	if err != nil {
		return "", err
	}
	id, ok := obj["elicitationId"].(string)
	if !ok || id == "" {
		return "", &Error{Path: "elicitationId", Reason: "want a string, got " + jsonKind(obj["elicitationId"])}
	}
	return id, nil
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
