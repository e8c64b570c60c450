package acpjson

import (
	"strings"

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

var toolKinds = enum[acpv2.ToolKind]{
	known: map[string]acpv2.ToolKind{
		"read":        acpv2.ToolKind_TOOL_KIND_READ,
		"edit":        acpv2.ToolKind_TOOL_KIND_EDIT,
		"delete":      acpv2.ToolKind_TOOL_KIND_DELETE,
		"move":        acpv2.ToolKind_TOOL_KIND_MOVE,
		"search":      acpv2.ToolKind_TOOL_KIND_SEARCH,
		"execute":     acpv2.ToolKind_TOOL_KIND_EXECUTE,
		"think":       acpv2.ToolKind_TOOL_KIND_THINK,
		"fetch":       acpv2.ToolKind_TOOL_KIND_FETCH,
		"switch_mode": acpv2.ToolKind_TOOL_KIND_SWITCH_MODE,
		"other":       acpv2.ToolKind_TOOL_KIND_OTHER,
	},
	unspecified: acpv2.ToolKind_TOOL_KIND_UNSPECIFIED,
	custom:      acpv2.ToolKind_TOOL_KIND_CUSTOM,
	unknown:     acpv2.ToolKind_TOOL_KIND_UNKNOWN,
}

var toolCallStatuses = enum[acpv2.ToolCallStatus]{
	known: map[string]acpv2.ToolCallStatus{
		"pending":     acpv2.ToolCallStatus_TOOL_CALL_STATUS_PENDING,
		"in_progress": acpv2.ToolCallStatus_TOOL_CALL_STATUS_IN_PROGRESS,
		"completed":   acpv2.ToolCallStatus_TOOL_CALL_STATUS_COMPLETED,
		"failed":      acpv2.ToolCallStatus_TOOL_CALL_STATUS_FAILED,
		"cancelled":   acpv2.ToolCallStatus_TOOL_CALL_STATUS_CANCELLED,
	},
	unspecified: acpv2.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED,
	custom:      acpv2.ToolCallStatus_TOOL_CALL_STATUS_CUSTOM,
	unknown:     acpv2.ToolCallStatus_TOOL_CALL_STATUS_UNKNOWN,
}

var stopReasons = enum[acpv2.StopReason]{
	known: map[string]acpv2.StopReason{
		"end_turn":          acpv2.StopReason_STOP_REASON_END_TURN,
		"max_tokens":        acpv2.StopReason_STOP_REASON_MAX_TOKENS,
		"max_turn_requests": acpv2.StopReason_STOP_REASON_MAX_TURN_REQUESTS,
		"refusal":           acpv2.StopReason_STOP_REASON_REFUSAL,
		"cancelled":         acpv2.StopReason_STOP_REASON_CANCELLED,
	},
	unspecified: acpv2.StopReason_STOP_REASON_UNSPECIFIED,
	custom:      acpv2.StopReason_STOP_REASON_CUSTOM,
	unknown:     acpv2.StopReason_STOP_REASON_UNKNOWN,
}

var permissionOptionKinds = enum[acpv2.PermissionOptionKind]{
	known: map[string]acpv2.PermissionOptionKind{
		"allow_once":    acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_ALLOW_ONCE,
		"allow_always":  acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_ALLOW_ALWAYS,
		"reject_once":   acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_REJECT_ONCE,
		"reject_always": acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_REJECT_ALWAYS,
	},
	unspecified: acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_UNSPECIFIED,
	custom:      acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_CUSTOM,
	unknown:     acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_UNKNOWN,
}

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
