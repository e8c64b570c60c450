package acpjson

// The draft notification dialect discriminates updates by `type` and nests
// a tool call under `toolCall` with its own field names. normaliseDraft
// rewrites such an update into the equivalent ACP v2 update object, which is
// then decoded as v2.

// draftKinds maps the draft's tool kinds to ACP's. Kinds not listed pass
// through unchanged.
var draftKinds = map[string]string{
	"read_file":  "read",
	"write_file": "edit",
	"edit_file":  "edit",
	"mcp_tool":   "other",
	"command":    "execute",
}

// normaliseDraft returns the v2 form of a draft-dialect update, or nil for a
// `type` it does not know (the caller keeps that update whole).
func normaliseDraft(obj map[string]any) (map[string]any, error) {
	typ, _ := obj["type"].(string)
	out := map[string]any{}
	copyExcept := func(src map[string]any, skip ...string) {
	next:
		for k, v := range src {
			for _, s := range skip {
				if k == s {
					continue next
				}
			}
			out[k] = v
		}
	}
	switch typ {
	case "content":
		out["sessionUpdate"] = "agent_message_chunk"
		copyExcept(obj, "type")
	case "tool_call":
		tc, ok := obj["toolCall"].(map[string]any)
		if !ok {
			return nil, &Error{Path: "toolCall", Reason: "want an object, got " + jsonKind(obj["toolCall"])}
		}
		out["sessionUpdate"] = "tool_call_update"
		copyExcept(obj, "type", "toolCall")
		for k, v := range tc {
			switch k {
			case "id":
				out["toolCallId"] = v
			case "content":
				out["title"] = v
			case "kind":
				if s, ok := v.(string); ok && draftKinds[s] != "" {
					v = draftKinds[s]
				}
				out["kind"] = v
			case "location":
				if v != nil {
					v = []any{v}
				}
				out["locations"] = v
			case "toolCallContent":
				if v != nil {
					v = []any{v}
				}
				out["content"] = v
			default:
				// status, _meta and anything unmodelled keep their names.
				out[k] = v
			}
		}
	case "usage":
		out["sessionUpdate"] = "usage_update"
		copyExcept(obj, "type", "usage")
		if u, ok := obj["usage"].(map[string]any); ok {
			copyExcept(u)
		}
	case "session_info":
		out["sessionUpdate"] = "session_info_update"
		copyExcept(obj, "type", "sessionInfo")
		if si, ok := obj["sessionInfo"].(map[string]any); ok {
			for k, v := range si {
				if k == "name" {
					k = "title"
				}
				out[k] = v
			}
		}
	case "current_mode":
		out["sessionUpdate"] = "current_mode_update"
		copyExcept(obj, "type")
	case "config_option":
		out["sessionUpdate"] = "config_option_update"
		copyExcept(obj, "type")
	case "available_commands":
		out["sessionUpdate"] = "available_commands_update"
		copyExcept(obj, "type")
	default:
		return nil, nil
	}
	return out, nil
}
