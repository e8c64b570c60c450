package acpjson

import (
	"strings"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The model keeps ACP's wire strings for kinds, statuses and reasons so that
// custom (`_`-prefixed) and future values pass through unchanged. These
// helpers give the typed view: a known value maps to its constant, a custom
// one to CUSTOM, any other to UNKNOWN, and "" to UNSPECIFIED.

// ToolKind returns the typed form of a tool kind wire value.
func ToolKind(wire string) acpv2.ToolKind {
	switch wire {
	case "read":
		return acpv2.ToolKind_TOOL_KIND_READ
	case "edit":
		return acpv2.ToolKind_TOOL_KIND_EDIT
	case "delete":
		return acpv2.ToolKind_TOOL_KIND_DELETE
	case "move":
		return acpv2.ToolKind_TOOL_KIND_MOVE
	case "search":
		return acpv2.ToolKind_TOOL_KIND_SEARCH
	case "execute":
		return acpv2.ToolKind_TOOL_KIND_EXECUTE
	case "think":
		return acpv2.ToolKind_TOOL_KIND_THINK
	case "fetch":
		return acpv2.ToolKind_TOOL_KIND_FETCH
	case "switch_mode":
		return acpv2.ToolKind_TOOL_KIND_SWITCH_MODE
	case "other":
		return acpv2.ToolKind_TOOL_KIND_OTHER
	}
	return classify(wire, acpv2.ToolKind_TOOL_KIND_UNSPECIFIED, acpv2.ToolKind_TOOL_KIND_CUSTOM, acpv2.ToolKind_TOOL_KIND_UNKNOWN)
}

// ToolCallStatus returns the typed form of a tool-call status wire value.
func ToolCallStatus(wire string) acpv2.ToolCallStatus {
	switch wire {
	case "pending":
		return acpv2.ToolCallStatus_TOOL_CALL_STATUS_PENDING
	case "in_progress":
		return acpv2.ToolCallStatus_TOOL_CALL_STATUS_IN_PROGRESS
	case "completed":
		return acpv2.ToolCallStatus_TOOL_CALL_STATUS_COMPLETED
	case "failed":
		return acpv2.ToolCallStatus_TOOL_CALL_STATUS_FAILED
	case "cancelled":
		return acpv2.ToolCallStatus_TOOL_CALL_STATUS_CANCELLED
	}
	return classify(wire, acpv2.ToolCallStatus_TOOL_CALL_STATUS_UNSPECIFIED, acpv2.ToolCallStatus_TOOL_CALL_STATUS_CUSTOM, acpv2.ToolCallStatus_TOOL_CALL_STATUS_UNKNOWN)
}

// StopReason returns the typed form of a stop reason wire value.
func StopReason(wire string) acpv2.StopReason {
	switch wire {
	case "end_turn":
		return acpv2.StopReason_STOP_REASON_END_TURN
	case "max_tokens":
		return acpv2.StopReason_STOP_REASON_MAX_TOKENS
	case "max_turn_requests":
		return acpv2.StopReason_STOP_REASON_MAX_TURN_REQUESTS
	case "refusal":
		return acpv2.StopReason_STOP_REASON_REFUSAL
	case "cancelled":
		return acpv2.StopReason_STOP_REASON_CANCELLED
	}
	return classify(wire, acpv2.StopReason_STOP_REASON_UNSPECIFIED, acpv2.StopReason_STOP_REASON_CUSTOM, acpv2.StopReason_STOP_REASON_UNKNOWN)
}

// PermissionOptionKind returns the typed form of a permission option kind
// wire value.
func PermissionOptionKind(wire string) acpv2.PermissionOptionKind {
	switch wire {
	case "allow_once":
		return acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_ALLOW_ONCE
	case "allow_always":
		return acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_ALLOW_ALWAYS
	case "reject_once":
		return acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_REJECT_ONCE
	case "reject_always":
		return acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_REJECT_ALWAYS
	}
	return classify(wire, acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_UNSPECIFIED, acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_CUSTOM, acpv2.PermissionOptionKind_PERMISSION_OPTION_KIND_UNKNOWN)
}

func classify[E ~int32](wire string, unspecified, custom, unknown E) E {
	switch {
	case wire == "":
		return unspecified
	case strings.HasPrefix(wire, "_"):
		return custom
	}
	return unknown
}
