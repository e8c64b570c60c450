package acpjson

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The codec is driven by the acp.v2 descriptors: a field's ACP member name is
// its proto JSON name, `meta` is `_meta`, and `extra` holds unmodelled
// members. This file holds the few facts the descriptors cannot carry:
// discriminated unions, renamed members, and members ACP treats as optional
// that proto3 cannot mark present.

// msgInfo is what the codec knows about one message type.
type msgInfo struct {
	desc protoreflect.MessageDescriptor
	// byKey maps an ACP member name to its field. Oneof members are absent:
	// unions are handled by union.
	byKey map[string]protoreflect.FieldDescriptor
	// keys is the ACP member name of every field in byKey, by field index.
	keys  map[protoreflect.FieldNumber]string
	meta  protoreflect.FieldDescriptor
	extra protoreflect.FieldDescriptor
	union *union
	// patch is set for the tri-state wrappers: the `value` field.
	patch protoreflect.FieldDescriptor
	// required lists fields whose absence or malformation is an error.
	required []protoreflect.FieldDescriptor
	// omitEmpty lists implicit-presence fields that are optional in ACP, so
	// an empty value is not encoded.
	omitEmpty map[protoreflect.FieldNumber]bool
}

// union describes an ACP union stored as a proto oneof.
type union struct {
	// key is the discriminator member, such as "type".
	key     string
	byTag   map[string]variant
	tagOf   map[protoreflect.FieldNumber]string
	unknown protoreflect.FieldDescriptor
	oneof   protoreflect.OneofDescriptor
}

// variant is one arm of a union. A flattened variant's members sit beside
// the discriminator; a nested one sits under member nested.
type variant struct {
	field  protoreflect.FieldDescriptor
	nested string
}

var infos = map[protoreflect.FullName]*msgInfo{}

func info(md protoreflect.MessageDescriptor) *msgInfo {
	return infos[md.FullName()]
}

func init() {
	files := []protoreflect.FileDescriptor{
		acpv2.File_acp_v2_content_proto,
		acpv2.File_acp_v2_tool_call_proto,
		acpv2.File_acp_v2_session_update_proto,
		acpv2.File_acp_v2_session_service_proto,
	}
	for _, f := range files {
		msgs := f.Messages()
		for i := 0; i < msgs.Len(); i++ {
			register(msgs.Get(i))
		}
	}

	defineUnion(&acpv2.ContentBlock{}, "type", "unknown", map[string]variant{
		"text":          {field: field(&acpv2.ContentBlock{}, "text")},
		"image":         {field: field(&acpv2.ContentBlock{}, "image")},
		"audio":         {field: field(&acpv2.ContentBlock{}, "audio")},
		"resource_link": {field: field(&acpv2.ContentBlock{}, "resource_link")},
		"resource":      {field: field(&acpv2.ContentBlock{}, "resource")},
	})
	defineUnion(&acpv2.ToolCallContent{}, "type", "unknown", map[string]variant{
		"content":  {field: field(&acpv2.ToolCallContent{}, "content"), nested: "content"},
		"diff":     {field: field(&acpv2.ToolCallContent{}, "diff")},
		"terminal": {field: field(&acpv2.ToolCallContent{}, "terminal")},
	})
	defineUnion(&acpv2.PlanContent{}, "type", "unknown", map[string]variant{
		"items": {field: field(&acpv2.PlanContent{}, "items")},
	})
	// A v2 permission request's subject, but for its tool_call form,
	// which DecodePermissionRequest takes as the request's tool call.
	defineUnion(&acpv2.PermissionSubject{}, "type", "unknown", map[string]variant{
		"command": {field: field(&acpv2.PermissionSubject{}, "command")},
	})

	// The fields of the agent's requests that the gateway fills in: not
	// ACP members, so never taken from the agent's JSON.
	gatewayOwned(&acpv2.PermissionRequest{}, "request_id", "preview")
	gatewayOwned(&acpv2.ElicitationRequest{}, "request_id")

	require(&acpv2.ToolCallUpdate{}, "tool_call_id")
	require(&acpv2.ToolCallContentChunk{}, "tool_call_id", "content")
	require(&acpv2.ToolCall{}, "tool_call_id")
	require(&acpv2.PermissionOption{}, "option_id")
	require(&acpv2.DiffChange{}, "operation")
	require(&acpv2.DiffPatch{}, "format")
	require(&acpv2.CommandSubject{}, "command", "cwd")
	require(&acpv2.ElicitationRequest{}, "mode")
	require(&acpv2.ElicitationComplete{}, "elicitation_id")

	omitEmpty(&acpv2.ToolCall{}, "kind", "status", "content", "locations")
	omitEmpty(&acpv2.Annotations{}, "audience")
	// A v1 diff has no changes; a v2 diff's empty changes are written
	// back by the encoder (see diffChanges).
	omitEmpty(&acpv2.Diff{}, "changes")

	buildTables()
	internNames()
}

func register(md protoreflect.MessageDescriptor) {
	in := &msgInfo{
		desc:      md,
		byKey:     map[string]protoreflect.FieldDescriptor{},
		keys:      map[protoreflect.FieldNumber]string{},
		omitEmpty: map[protoreflect.FieldNumber]bool{},
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case fd.Name() == "extra" && isStruct(fd):
			in.extra = fd
			continue
		case fd.Name() == "meta" && (isStruct(fd) || fd.Message() != nil && fd.Message().Name() == "StructPatch"):
			in.meta = fd
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if od.Name() == "op" && fd.Name() == "value" {
				in.patch = fd
			}
			continue
		}
		key := fd.JSONName()
		if fd == in.meta {
			key = "_meta"
		}
		in.byKey[key] = fd
		in.keys[fd.Number()] = key
	}
	infos[md.FullName()] = in
	nested := md.Messages()
	for i := 0; i < nested.Len(); i++ {
		register(nested.Get(i))
	}
}

func field(m proto.Message, name protoreflect.Name) protoreflect.FieldDescriptor {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(name)
	if fd == nil {
		panic("acpjson: no field " + string(name))
	}
	return fd
}

func defineUnion(m proto.Message, key string, unknown protoreflect.Name, variants map[string]variant) {
	in := info(m.ProtoReflect().Descriptor())
	u := &union{key: key, byTag: variants, tagOf: map[protoreflect.FieldNumber]string{}}
	u.unknown = field(m, unknown)
	u.oneof = u.unknown.ContainingOneof()
	for tag, v := range variants {
		u.tagOf[v.field.Number()] = tag
	}
	in.union = u
}

func require(m proto.Message, names ...protoreflect.Name) {
	in := info(m.ProtoReflect().Descriptor())
	for _, n := range names {
		in.required = append(in.required, field(m, n))
	}
}

// gatewayOwned takes the fields names of m out of its ACP members.
func gatewayOwned(m proto.Message, names ...protoreflect.Name) {
	in := info(m.ProtoReflect().Descriptor())
	for _, n := range names {
		fd := field(m, n)
		delete(in.byKey, in.keys[fd.Number()])
		delete(in.keys, fd.Number())
	}
}

func omitEmpty(m proto.Message, names ...protoreflect.Name) {
	in := info(m.ProtoReflect().Descriptor())
	for _, n := range names {
		in.omitEmpty[field(m, n).Number()] = true
	}
}

func isStruct(fd protoreflect.FieldDescriptor) bool {
	return fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Struct"
}

// updateTags maps a `sessionUpdate` value to its SessionUpdate field: every
// member of the `update` oneof but `unknown`, by its proto name, which is
// the same in v1 and v2. v1 `tool_call` is handled separately.
var updateTags = func() map[string]protoreflect.FieldDescriptor {
	fields := updateOneof.Fields()
	tags := make(map[string]protoreflect.FieldDescriptor, fields.Len())
	for i := 0; i < fields.Len(); i++ {
		if fd := fields.Get(i); fd.Name() != "unknown" {
			tags[string(fd.Name())] = fd
		}
	}
	return tags
}()

// v1Tags lists the SessionUpdate variants ACP v1 can carry as they are.
var v1Tags = map[string]bool{
	"user_message_chunk":        true,
	"agent_message_chunk":       true,
	"agent_thought_chunk":       true,
	"tool_call_update":          true,
	"plan":                      true,
	"available_commands_update": true,
	"current_mode_update":       true,
	"config_option_update":      true,
	"session_info_update":       true,
	"usage_update":              true,
}

var (
	mdToolCallUpdate      = (&acpv2.ToolCallUpdate{}).ProtoReflect().Descriptor()
	mdSessionConfigOption = (&acpv2.SessionConfigOption{}).ProtoReflect().Descriptor()
	mdEmbeddedResource    = (&acpv2.EmbeddedResource{}).ProtoReflect().Descriptor()
	mdDiff                = (&acpv2.Diff{}).ProtoReflect().Descriptor()
	fdDiffChanges         = mdDiff.Fields().ByName("changes")
	mdSessionUpdate       = (&acpv2.SessionUpdate{}).ProtoReflect().Descriptor()
	mdPermissionRequest   = (&acpv2.PermissionRequest{}).ProtoReflect().Descriptor()
	mdElicitationRequest  = (&acpv2.ElicitationRequest{}).ProtoReflect().Descriptor()
	updateOneof           = mdSessionUpdate.Oneofs().ByName("update")
)
