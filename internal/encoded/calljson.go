package encoded

import (
	"sync"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/eventjson"
)

// toolCallDesc is the descriptor of the merged tool call, whose parts
// callJSON reuses.
var toolCallDesc = (&acpv2.ToolCall{}).ProtoReflect().Descriptor()

// callJSON is the JSON of a tool call's parts (its content items,
// locations, rawInput, rawOutput, _meta, extra) as the latest of its
// events to make its JSON wrote them, shared by the events of the call's
// versions, from Calls.Body until the call is forgotten: each version
// shares most of its parts with the one before (merge.State), so that an
// event's JSON writes only what changed and shares the rest. The events
// make their JSON when a JSON stream first asks, in any order and
// concurrently; a part is reused only where it is the very same message,
// so any version's parts serve any other's.
type callJSON struct {
	mu    sync.Mutex
	seq   uint64 // of the event that made parts
	parts *eventjson.Parts
}

// marshal returns the JSON of msg, the event of seq, a version of the
// call, in segments: eventjson.Marshal's, with the parts it shares with
// the latest version made before taken from that version's JSON, and
// keeps its parts for the next when it is the latest.
func (c *callJSON) marshal(seq uint64, msg *acpv2.SessionEvent) ([][]byte, error) {
	c.mu.Lock()
	prev := c.parts
	c.mu.Unlock()
	b, parts, err := eventjson.MarshalReusing(msg, toolCallDesc, prev)
	if parts != nil {
		c.mu.Lock()
		if c.parts == nil || seq > c.seq {
			c.seq, c.parts = seq, parts
		}
		c.mu.Unlock()
	}
	return b, err
}
