package acpjson

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The model keeps ACP's wire strings for kinds, statuses and reasons so that
// custom (`_`-prefixed) and future values pass through unchanged. These
// helpers give the typed view: a known value maps to its constant, a custom
// one to CUSTOM, any other to UNKNOWN, and "" to UNSPECIFIED.

// enum is the typed view of one family of wire strings.
type enum[E ~int32] struct {
	known                        map[string]E
	unspecified, custom, unknown E
}

func (e enum[E]) of(wire string) E {
	if v, ok := e.known[wire]; ok {
		return v
	}
	switch {
	case wire == "":
		return e.unspecified
	case strings.HasPrefix(wire, "_"):
		return e.custom
	}
	return e.unknown
}

// enumOf builds the typed view of an ACP enum from its descriptor. Each value
// is named after its wire string: TOOL_KIND_SWITCH_MODE is "switch_mode",
// the prefix being the zero value's name without UNSPECIFIED. The values
// UNSPECIFIED, CUSTOM and UNKNOWN have no wire string.
func enumOf[E ~int32](ed protoreflect.EnumDescriptor) enum[E] {
	values := ed.Values()
	prefix, ok := strings.CutSuffix(string(values.ByNumber(0).Name()), "UNSPECIFIED")
	if !ok {
		panic("acpjson: enum " + string(ed.FullName()) + " has no UNSPECIFIED zero value")
	}
	e := enum[E]{known: make(map[string]E, values.Len())}
	var custom, unknown bool
	for i := 0; i < values.Len(); i++ {
		vd := values.Get(i)
		v := E(vd.Number())
		name, ok := strings.CutPrefix(string(vd.Name()), prefix)
		if !ok {
			panic("acpjson: enum value " + string(vd.FullName()) + " lacks the prefix " + prefix)
		}
		switch name {
		case "UNSPECIFIED":
			e.unspecified = v
		case "CUSTOM":
			e.custom, custom = v, true
		case "UNKNOWN":
			e.unknown, unknown = v, true
		default:
			e.known[strings.ToLower(name)] = v
		}
	}
	if !custom || !unknown {
		panic("acpjson: enum " + string(ed.FullName()) + " lacks CUSTOM or UNKNOWN")
	}
	return e
}

var (
	toolKinds             = enumOf[acpv2.ToolKind](acpv2.ToolKind(0).Descriptor())
	toolCallStatuses      = enumOf[acpv2.ToolCallStatus](acpv2.ToolCallStatus(0).Descriptor())
	stopReasons           = enumOf[acpv2.StopReason](acpv2.StopReason(0).Descriptor())
	permissionOptionKinds = enumOf[acpv2.PermissionOptionKind](acpv2.PermissionOptionKind(0).Descriptor())
)

// ToolKind returns the typed form of a tool kind wire value.
func ToolKind(wire string) acpv2.ToolKind { return toolKinds.of(wire) }

// ToolCallStatus returns the typed form of a tool-call status wire value.
func ToolCallStatus(wire string) acpv2.ToolCallStatus { return toolCallStatuses.of(wire) }

// StopReason returns the typed form of a stop reason wire value.
func StopReason(wire string) acpv2.StopReason { return stopReasons.of(wire) }

// PermissionOptionKind returns the typed form of a permission option kind
// wire value.
func PermissionOptionKind(wire string) acpv2.PermissionOptionKind {
	return permissionOptionKinds.of(wire)
}
