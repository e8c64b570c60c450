package bench

import (
	"encoding/json"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/protowalk"
)

// skimCodec is the "proto" codec of the bench's gateway clients. It reads
// of each event only what the bench needs (its seq, its stamp, whether it
// ends the turn) instead of decoding it whole, as the pipe and websocketd
// readers decode only those members of each line: the client shares the
// bench machine's two CPUs with the agent and the gateway it measures, and
// a thousand fan-out watchers decoding every event in full (Struct maps
// and all) took most of them. Everything else it marshals and unmarshals
// as the proto codec does.
type skimCodec struct{}

func (skimCodec) Name() string { return "proto" }

func (skimCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return proto.Marshal(pm)
}

// eventSlot resets m and returns where its event goes, when m is a
// PromptResponse or WatchResponse.
func eventSlot(m any) **acpv2.SessionEvent {
	switch r := m.(type) {
	case *acpv2.WatchResponse:
		proto.Reset(r)
		return &r.Event
	case *acpv2.PromptResponse:
		proto.Reset(r)
		return &r.Event
	}
	return nil
}

// fallback unmarshals a message that is not a stream response.
func fallback(m any, unmarshal func(proto.Message) error) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	return unmarshal(pm)
}

func (skimCodec) Unmarshal(data []byte, m any) error {
	ev := eventSlot(m)
	if ev == nil {
		return fallback(m, func(pm proto.Message) error { return proto.Unmarshal(data, pm) })
	}
	return protowalk.Fields(data, func(num protowire.Number, typ protowire.Type, b []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil // a heartbeat
		}
		var err error
		*ev, err = skimEvent(b)
		return err
	})
}

// Field numbers the skim reads: SessionEvent's, and the meta field of the
// updates that carry the bench stamp.
const (
	fieldSeq, fieldMessageChunk, fieldThoughtChunk = 1, 11, 12
	fieldToolCallUpdate, fieldContentChunk         = 13, 14
	fieldTurnEnded, fieldMeta, fieldPatchValue     = 44, 14, 2
)

// skimEvent reads an event's seq, the bench stamp in its update's _meta,
// and whether it ends the turn.
func skimEvent(data []byte) (*acpv2.SessionEvent, error) {
	ev := &acpv2.SessionEvent{}
	err := protowalk.Fields(data, func(num protowire.Number, typ protowire.Type, b []byte) error {
		if num == fieldSeq && typ == protowire.VarintType {
			ev.Seq, _ = protowire.ConsumeVarint(b)
			return nil
		}
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldTurnEnded:
			te := &acpv2.TurnEnded{}
			if err := proto.Unmarshal(b, te); err != nil {
				return err
			}
			ev.Event = &acpv2.SessionEvent_TurnEnded{TurnEnded: te}
		case fieldMessageChunk, fieldThoughtChunk, fieldContentChunk, fieldToolCallUpdate:
			meta, err := skimMeta(b, num == fieldToolCallUpdate)
			if err != nil {
				return err
			}
			switch num {
			case fieldMessageChunk:
				ev.Event = &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{Meta: meta}}
			case fieldThoughtChunk:
				ev.Event = &acpv2.SessionEvent_AgentThoughtChunk{AgentThoughtChunk: &acpv2.ContentChunk{Meta: meta}}
			case fieldContentChunk:
				ev.Event = &acpv2.SessionEvent_ToolCallContentChunk{ToolCallContentChunk: &acpv2.ToolCallContentChunk{Meta: meta}}
			default:
				ev.Event = &acpv2.SessionEvent_ToolCallUpdate{ToolCallUpdate: &acpv2.ToolCallUpdate{
					Meta: &acpv2.StructPatch{Op: &acpv2.StructPatch_Value{Value: meta}}}}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ev, nil
}

// skimMeta decodes the _meta of an update message (a StructPatch's value
// for a tool-call patch), or returns nil when it has none.
func skimMeta(data []byte, patch bool) (*structpb.Struct, error) {
	meta, err := protowalk.Bytes(data, fieldMeta)
	if err == nil && meta != nil && patch {
		meta, err = protowalk.Bytes(meta, fieldPatchValue)
	}
	if err != nil || meta == nil {
		return nil, err
	}
	s := &structpb.Struct{}
	return s, proto.Unmarshal(meta, s)
}

// skimJSONCodec is skimCodec's counterpart for the Connect JSON clients:
// encoding/json reads the same three things from each response, as the
// pipe and websocketd readers read their lines.
type skimJSONCodec struct{}

func (skimJSONCodec) Name() string { return "json" }

func (skimJSONCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return protojson.Marshal(pm)
}

// jsonMeta is an update's _meta as the bench reads it.
type jsonMeta struct {
	Bench *struct {
		N float64 `json:"n"`
		T string  `json:"t"`
	} `json:"bench"`
}

// chunkJSON is an update that carries _meta as a plain object.
type chunkJSON struct {
	Meta *jsonMeta `json:"meta"`
}

// eventJSON is what the bench reads of a response's event.
type eventJSON struct {
	Seq            string `json:"seq"`
	ToolCallUpdate *struct {
		Meta *struct {
			Value *jsonMeta `json:"value"`
		} `json:"meta"`
	} `json:"toolCallUpdate"`
	ToolCallContentChunk *chunkJSON `json:"toolCallContentChunk"`
	AgentMessageChunk    *chunkJSON `json:"agentMessageChunk"`
	AgentThoughtChunk    *chunkJSON `json:"agentThoughtChunk"`
	TurnEnded            *struct {
		StopReason string `json:"stopReason"`
	} `json:"turnEnded"`
}

func (skimJSONCodec) Unmarshal(data []byte, m any) error {
	ev := eventSlot(m)
	if ev == nil {
		return fallback(m, func(pm proto.Message) error {
			return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, pm)
		})
	}
	var resp struct {
		Event *eventJSON `json:"event"`
	}
	if err := json.Unmarshal(data, &resp); err != nil || resp.Event == nil {
		return err // nil for a heartbeat
	}
	e := resp.Event
	seq, err := strconv.ParseUint(e.Seq, 10, 64)
	if err != nil && e.Seq != "" {
		return err
	}
	out := &acpv2.SessionEvent{Seq: seq}
	meta := func(m *jsonMeta) *structpb.Struct {
		if m == nil || m.Bench == nil {
			return nil
		}
		return &structpb.Struct{Fields: map[string]*structpb.Value{"bench": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"n": structpb.NewNumberValue(m.Bench.N), "t": structpb.NewStringValue(m.Bench.T)}})}}
	}
	switch {
	case e.TurnEnded != nil:
		out.Event = &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{StopReason: e.TurnEnded.StopReason}}
	case e.ToolCallUpdate != nil:
		var value *jsonMeta
		if e.ToolCallUpdate.Meta != nil {
			value = e.ToolCallUpdate.Meta.Value
		}
		out.Event = &acpv2.SessionEvent_ToolCallUpdate{ToolCallUpdate: &acpv2.ToolCallUpdate{
			Meta: &acpv2.StructPatch{Op: &acpv2.StructPatch_Value{Value: meta(value)}}}}
	case e.ToolCallContentChunk != nil:
		out.Event = &acpv2.SessionEvent_ToolCallContentChunk{ToolCallContentChunk: &acpv2.ToolCallContentChunk{Meta: meta(e.ToolCallContentChunk.Meta)}}
	case e.AgentMessageChunk != nil:
		out.Event = &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{Meta: meta(e.AgentMessageChunk.Meta)}}
	case e.AgentThoughtChunk != nil:
		out.Event = &acpv2.SessionEvent_AgentThoughtChunk{AgentThoughtChunk: &acpv2.ContentChunk{Meta: meta(e.AgentThoughtChunk.Meta)}}
	}
	*ev = out
	return nil
}
