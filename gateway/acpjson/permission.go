package acpjson

import (
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
// whole. A v1 `toolCall` is taken before a v2 subject.
//
// The request and its parts are decoded as every ACP message is, through
// the tables of PermissionRequest and its sub-messages: null is the same
// as omitted, members the request does not model are dropped (an option's
// and a command subject's are kept in their extra), a member of the wrong
// shape is an error, and `options` is required.
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
	if err := r.open(); err != nil {
		return nil, err
	}
	d := decoder{version: v}
	req := &acpv2.PermissionRequest{}
	t := tableOf(mdPermissionRequest)
	// The subject is read apart, once the request is: its tool_call form
	// is the request's tool call, and a v1 toolCall is taken before it.
	if err := d.fill(r, "subject", "", false, target{unsafe.Pointer(req), t}, target{}); err != nil {
		return nil, err
	}
	if !r.end() {
		return nil, errSyntax
	}
	if req.Options == nil {
		return nil, &Error{Path: "options", Reason: "want an array of permission options, got null"}
	}
	if req.ToolCall != nil {
		return req, nil
	}
	return req, d.permissionSubject(data, target{unsafe.Pointer(req), t})
}

// permissionSubject decodes the last `subject` member of the permission
// request data into the request at pr: the toolCall of a `tool_call`
// subject is the request's tool call, a subject of another type its
// subject.
func (d decoder) permissionSubject(data []byte, pr target) error {
	raw, err := lastMember(data, "subject")
	if err != nil || len(raw) == 0 || raw[0] == 'n' {
		return err
	}
	if raw[0] != '{' {
		return &Error{Path: "subject", Reason: "want an object, got " + kindName(Kind(raw[0]))}
	}
	typ, err := lastString(raw, "type")
	if err != nil {
		return err
	}
	if typ != "tool_call" {
		r := getReader(raw, MaxDepth-1)
		defer putReader(r)
		return within(d.member(r, pr, pr.t.lookup([]byte("subject"))), "subject")
	}
	tc, err := lastMember(raw, "toolCall")
	if err != nil || len(tc) == 0 {
		return err
	}
	r := getReader(tc, MaxDepth-2)
	defer putReader(r)
	return within(within(d.member(r, pr, pr.t.lookup([]byte("toolCall"))), "toolCall"), "subject")
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
