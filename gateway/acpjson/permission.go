package acpjson

import (
	"fmt"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// DecodePermissionRequest decodes the params of an agent's
// `session/request_permission` request into a PermissionRequest (without its
// request id or preview, which the gateway fills in).
//
// ACP v1 carries the tool call as `toolCall`; ACP v2 carries a `title`, a
// `description` and a `subject`, whose `tool_call` form holds the same
// ToolCallUpdate shape. A v2 subject of another type is the request's
// `subject`: a command, or one of a type the gateway does not know, kept
// whole.
func DecodePermissionRequest(data []byte, v Version) (*acpv2.PermissionRequest, error) {
	obj, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	d := decoder{version: v}
	req := &acpv2.PermissionRequest{}
	if title, ok := obj["title"].(string); ok {
		req.Title = title
	}
	if desc, ok := obj["description"].(string); ok {
		req.Description = &desc
	}
	tc, _ := obj["toolCall"].(map[string]any)
	var subject map[string]any
	if tc == nil {
		subject, _ = obj["subject"].(map[string]any)
		if t, _ := subject["type"].(string); t == "tool_call" {
			tc, _ = subject["toolCall"].(map[string]any)
			subject = nil
		}
	}
	if tc != nil {
		req.ToolCall = &acpv2.ToolCallUpdate{}
		if err := d.object(tc, req.ToolCall.ProtoReflect()); err != nil {
			return nil, within(err, "toolCall")
		}
	}
	opts, ok := obj["options"].([]any)
	if !ok {
		return nil, &Error{Path: "options", Reason: "want an array of permission options, got " + jsonKind(obj["options"])}
	}
	for i, o := range opts {
		om, ok := o.(map[string]any)
		if !ok {
			return nil, &Error{Path: fmt.Sprintf("options[%d]", i), Reason: "want an object, got " + jsonKind(o)}
		}
		po := &acpv2.PermissionOption{}
		if err := d.object(om, po.ProtoReflect()); err != nil {
			return nil, within(err, fmt.Sprintf("options[%d]", i))
		}
		req.Options = append(req.Options, po)
	}
	if subject != nil {
		req.Subject = &acpv2.PermissionSubject{}
		if err := d.object(subject, req.Subject.ProtoReflect()); err != nil {
			return nil, within(err, "subject")
		}
	}
	if meta, ok := obj["_meta"].(map[string]any); ok {
		req.Meta = toStruct(meta)
	}
	return req, nil
}

// EncodePermissionResponse encodes the result of a `session/request_permission`
// request for outcome: `{"outcome":{"outcome":"selected","optionId":...}}` or
// `{"outcome":{"outcome":"cancelled"}}`.
func EncodePermissionResponse(outcome *acpv2.PermissionOutcome) []byte {
	e := encoder{version: V2}
	if id, ok := outcome.GetOutcome().(*acpv2.PermissionOutcome_SelectedOptionId); ok {
		e.buf.WriteString(`{"outcome":{"outcome":"selected","optionId":`)
		e.str(id.SelectedOptionId)
		e.buf.WriteString(`}}`)
		return e.buf.Bytes()
	}
	return []byte(`{"outcome":{"outcome":"cancelled"}}`)
}
