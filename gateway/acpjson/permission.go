package acpjson

import (
	"fmt"
	"unsafe"

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
	req, err := decodePermissionRequest(data, v)
	if err != nil {
		return nil, docError(data, err)
	}
	return req, nil
}

func decodePermissionRequest(data []byte, v Version) (*acpv2.PermissionRequest, error) {
	r := getReader(data, MaxDepth)
	defer putReader(r)
	if r.kind() != '{' {
		return nil, decoder{}.notObject(r)
	}
	// The members that matter, as their bytes (the last of each).
	var title, description string
	var hasDescription bool
	var toolCall, subject, options, meta []byte
	raw := func() ([]byte, error) {
		start, d0 := r.offset(), r.depth()
		if err := r.skip(); err != nil {
			return nil, err
		}
		return r.finish(start, d0)
	}
	ok, err := r.members(func(name []byte) (bool, error) {
		var err error
		switch string(name) {
		case "title":
			title = ""
			if r.kind() == '"' {
				title, err = r.str()
				return true, err
			}
		case "description":
			description, hasDescription = "", false
			if r.kind() == '"' {
				description, err = r.str()
				hasDescription = true
				return true, err
			}
		case "toolCall":
			toolCall, err = raw()
			return true, err
		case "subject":
			subject, err = raw()
			return true, err
		case "options":
			options, err = raw()
			return true, err
		case "_meta":
			meta, err = raw()
			return true, err
		}
		return true, r.skip()
	})
	if err == nil && (!ok || !r.end()) {
		err = errSyntax
	}
	if err != nil {
		return nil, err
	}
	isObject := func(b []byte) bool { return len(b) > 0 && b[0] == '{' }
	d := decoder{version: v}
	req := &acpv2.PermissionRequest{Title: title}
	if hasDescription {
		req.Description = &description
	}
	switch {
	case isObject(toolCall):
		subject = nil
	case isObject(subject):
		toolCall = nil
		typ, err := lastString(subject, "type")
		if err != nil {
			return nil, err
		}
		if typ == "tool_call" {
			if toolCall, err = lastMember(subject, "toolCall"); err != nil {
				return nil, err
			}
			if !isObject(toolCall) {
				toolCall = nil
			}
			subject = nil
		}
	default:
		toolCall, subject = nil, nil
	}
	if toolCall != nil {
		req.ToolCall = &acpv2.ToolCallUpdate{}
		sub := getReader(toolCall, MaxDepth-1)
		err := d.object(sub, tableOf(mdToolCallUpdate), unsafe.Pointer(req.ToolCall))
		putReader(sub)
		if err != nil {
			return nil, within(err, "toolCall")
		}
	}
	if len(options) == 0 || options[0] != '[' {
		got := "null"
		if len(options) > 0 {
			got = kindName(Kind(options[0]))
		}
		return nil, &Error{Path: "options", Reason: "want an array of permission options, got " + got}
	}
	sub := getReader(options, MaxDepth-1)
	defer putReader(sub)
	if err := sub.open(); err != nil {
		return nil, err
	}
	for i := 0; ; i++ {
		more, err := sub.more()
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		if k := sub.kind(); k != '{' {
			return nil, &Error{Path: fmt.Sprintf("options[%d]", i), Reason: "want an object, got " + kindName(k)}
		}
		po := &acpv2.PermissionOption{}
		if err := d.object(sub, tableOf(po.ProtoReflect().Descriptor()), unsafe.Pointer(po)); err != nil {
			return nil, within(err, fmt.Sprintf("options[%d]", i))
		}
		req.Options = append(req.Options, po)
	}
	if subject != nil {
		req.Subject = &acpv2.PermissionSubject{}
		sub := getReader(subject, MaxDepth-1)
		err := d.object(sub, tableOf(req.Subject.ProtoReflect().Descriptor()), unsafe.Pointer(req.Subject))
		putReader(sub)
		if err != nil {
			return nil, within(err, "subject")
		}
	}
	if isObject(meta) {
		if req.Meta, err = r.structOf(meta, 1); err != nil {
			return nil, err
		}
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
