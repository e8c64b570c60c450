package bench

import (
	"encoding/json"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// The skimming codecs read from each event of the workload what a full
// decode gives the bench: the seq, the stamp, the turn's end.
func TestSkimReadsWhatTheBenchNeeds(t *testing.T) {
	t.Parallel()
	var events []*acpv2.SessionEvent
	for _, v := range []int{1, 2} {
		lm := newLineMaker(v, 64, "s-1")
		tools := merge.New()
		for n := 1; n <= 2*groupSize; n++ {
			var p struct {
				Params struct {
					Update json.RawMessage `json:"update"`
				} `json:"params"`
			}
			if err := json.Unmarshal(lm.appendLine(nil, n, int64(1000+n)), &p); err != nil {
				t.Fatal(err)
			}
			u, err := acpjson.DecodeUpdate(p.Params.Update, acpjson.Version(v))
			if err != nil {
				t.Fatal(err)
			}
			ev := &acpv2.SessionEvent{Time: timestamppb.Now()}
			switch e := u.GetUpdate().(type) {
			case *acpv2.SessionUpdate_ToolCallUpdate:
				ev.Event = &acpv2.SessionEvent_ToolCallUpdate{ToolCallUpdate: e.ToolCallUpdate}
				merged, _ := tools.ApplyUpdate(e.ToolCallUpdate)
				events = append(events, &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCall{ToolCall: merged}})
			case *acpv2.SessionUpdate_ToolCallContentChunk:
				ev.Event = &acpv2.SessionEvent_ToolCallContentChunk{ToolCallContentChunk: e.ToolCallContentChunk}
			case *acpv2.SessionUpdate_AgentMessageChunk:
				ev.Event = &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: e.AgentMessageChunk}
			case *acpv2.SessionUpdate_AgentThoughtChunk:
				ev.Event = &acpv2.SessionEvent_AgentThoughtChunk{AgentThoughtChunk: e.AgentThoughtChunk}
			default:
				t.Fatalf("update %d: %T", n, e)
			}
			events = append(events, ev)
		}
	}
	events = append(events, &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{StopReason: "end_turn"}}})
	stamped := 0
	for i, ev := range events {
		ev.Seq = uint64(i + 1)
		for _, resp := range []proto.Message{&acpv2.WatchResponse{Event: ev}, &acpv2.PromptResponse{Event: ev}} {
			for _, codec := range []connect.Codec{skimCodec{}, skimJSONCodec{}} {
				wire, err := codec.Marshal(resp)
				if err != nil {
					t.Fatal(err)
				}
				got := resp.ProtoReflect().New().Interface()
				if err := codec.Unmarshal(wire, got); err != nil {
					t.Fatalf("event %d, %s: %v", i, codec.Name(), err)
				}
				skimmed := got.(interface{ GetEvent() *acpv2.SessionEvent }).GetEvent()
				n1, t1, ok1 := stampOf(ev)
				n2, t2, ok2 := stampOf(skimmed)
				if skimmed.GetSeq() != ev.GetSeq() || n1 != n2 || t1 != t2 || ok1 != ok2 ||
					(skimmed.GetTurnEnded() != nil) != (ev.GetTurnEnded() != nil) {
					t.Fatalf("event %d (%T), %s: skimmed seq %d stamp %d/%d/%v, want seq %d stamp %d/%d/%v",
						i, ev.GetEvent(), codec.Name(), skimmed.GetSeq(), n2, t2, ok2, ev.GetSeq(), n1, t1, ok1)
				}
				if ok1 {
					stamped++
				}
			}
		}
	}
	if stamped != 2*2*4*groupSize {
		t.Fatalf("%d stamped events, want every update's, both ways", stamped)
	}
	// A heartbeat has no event.
	for _, codec := range []connect.Codec{skimCodec{}, skimJSONCodec{}} {
		wire, _ := codec.Marshal(&acpv2.WatchResponse{Heartbeat: timestamppb.Now()})
		hb := &acpv2.WatchResponse{}
		if err := codec.Unmarshal(wire, hb); err != nil || hb.GetEvent() != nil {
			t.Fatalf("%s: heartbeat skimmed to %v, %v", codec.Name(), hb, err)
		}
	}
}
