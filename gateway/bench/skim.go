package bench

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// skimCodec is the "proto" codec of the fan-out phase's watchers. It
// reads of each event only what the bench needs (its seq, its stamp,
// whether it ends the turn) instead of decoding it whole: a thousand
// watchers decoding every event in full took most of the bench machine's
// CPU, from the agent and the gateway the phase measures. Everything else
// it marshals and unmarshals as the proto codec does.
type skimCodec struct{}

func (skimCodec) Name() string { return "proto" }

func (skimCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return proto.Marshal(pm)
}

func (skimCodec) Unmarshal(data []byte, m any) error {
	var ev **acpv2.SessionEvent
	switch r := m.(type) {
	case *acpv2.WatchResponse:
		proto.Reset(r)
		ev = &r.Event
	case *acpv2.PromptResponse:
		proto.Reset(r)
		ev = &r.Event
	default:
		pm, ok := m.(proto.Message)
		if !ok {
			return fmt.Errorf("%T is not a proto.Message", m)
		}
		return proto.Unmarshal(data, pm)
	}
	return eachField(data, func(num protowire.Number, typ protowire.Type, b []byte) error {
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
	err := eachField(data, func(num protowire.Number, typ protowire.Type, b []byte) error {
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
	var meta []byte
	if err := eachField(data, func(num protowire.Number, typ protowire.Type, b []byte) error {
		if num == fieldMeta && typ == protowire.BytesType {
			meta = b
		}
		return nil
	}); err != nil || meta == nil {
		return nil, err
	}
	if patch {
		var value []byte
		if err := eachField(meta, func(num protowire.Number, typ protowire.Type, b []byte) error {
			if num == fieldPatchValue && typ == protowire.BytesType {
				value = b
			}
			return nil
		}); err != nil || value == nil {
			return nil, err
		}
		meta = value
	}
	s := &structpb.Struct{}
	return s, proto.Unmarshal(meta, s)
}

// eachField calls f with each field of a message's encoding: its number,
// its wire type and its value (a length-delimited field's contents, or
// the other types' encoded value).
func eachField(data []byte, f func(num protowire.Number, typ protowire.Type, b []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		m := protowire.ConsumeFieldValue(num, typ, data)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b := data[:m]
		if typ == protowire.BytesType {
			b, _ = protowire.ConsumeBytes(b)
		}
		if err := f(num, typ, b); err != nil {
			return err
		}
		data = data[m:]
	}
	return nil
}
