// Package merge is the ACP v2 tool-call merge engine: it folds a session's
// ToolCallUpdate and ToolCallContentChunk messages into one merged ToolCall
// per tool_call_id, the state a client shows after applying them in order.
//
// The package is pure Go and does no I/O. A State holds one session's tool
// calls; it is not safe for concurrent use, so callers serialise access to
// it (typically one State per session, owned by the session's goroutine).
//
// # Merge rules
//
// An update for an unseen id creates a tool call that starts empty (only
// tool_call_id set) and then has the update applied; an update for a seen id
// patches it. Nothing is defaulted: kind and status stay "" until the agent
// sets them, and a consumer applies the ACP defaults (kind "other", status
// "pending") when it renders them.
//
// Every patch field of a ToolCallUpdate (title, kind, status, content,
// locations, raw_input, raw_output, meta) is a wrapper with three states:
//
//   - nil wrapper: the field is unchanged;
//   - the clear case: the field is cleared ("" for strings, nil for lists,
//     values and structs);
//   - the value case: the field is replaced.
//
// A wrapper that is present but has neither case set is treated like a nil
// wrapper (unchanged). content and locations are replaced as whole lists, and
// a value holding an empty list clears the field just like the clear case, so
// a merged tool call never holds an empty non-nil list. kind and status are
// kept verbatim, custom ("_x") and unknown values included; content items of
// the unknown case are kept like any other item; meta is replaced whole.
//
// extra (the update's unmodelled members) merges key by key: each key of the
// update's extra replaces the stored key, and a key whose value is JSON null
// (a structpb NullValue, a nil *structpb.Value or a Value with no kind set)
// deletes the stored key. The stored extra is nil when it has no keys.
//
// A ToolCallContentChunk appends its one content item to the tool call's
// content, creating the tool call (with that one item) if its id is unseen.
// A later update that carries content (value or clear) replaces everything
// chunks built, and later chunks append to that replacement. A chunk's own
// meta and extra are chunk-scoped and are not merged into the tool call.
//
// # Ownership and immutability
//
// All messages passed to a State and all messages it returns are shared, not
// copied, and must be treated as immutable by everyone: the caller must not
// modify an update, chunk, or any message reachable from it (content items,
// locations, Values, Structs) after passing it in, nor modify a returned
// ToolCall or anything reachable from it. In return, the State never
// modifies a ToolCall it has returned (from ApplyUpdate, ApplyChunk, Preview,
// Get or Snapshot) or any message it has been given, so returned tool calls
// can be stored in events and replayed later. The State works copy-on-write:
// each apply builds a new ToolCall that shares unchanged field values with
// the previous version. Use proto.Clone on a returned message before
// modifying it.
package merge
