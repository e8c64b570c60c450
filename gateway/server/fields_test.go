package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
	"github.com/acp-gateway/acp-gateway/internal/testutil/protofill"
)

// The proto codec, which writes a stream message holding only its event
// by hand (soleEvent, MarshalAppend), keeps every field of the stream
// messages: for messages that set each field the descriptors name, sent
// as is and as an encoded.Reply. A field added to PromptResponse or
// WatchResponse fails here until soleEvent leaves messages that set it to
// proto.Marshal.
func TestProtoCodecKeepsEveryField(t *testing.T) {
	t.Parallel()
	c := newProtoCodec()
	for _, m := range []proto.Message{&acpv2.PromptResponse{}, &acpv2.WatchResponse{}} {
		for _, v := range protofill.Variants(m) {
			var ev *encoded.Event
			if soleEvent(v) {
				var err error
				if ev, err = encoded.New(v.(interface{ GetEvent() *acpv2.SessionEvent }).GetEvent()); err != nil {
					t.Fatal(err)
				}
			}
			for _, sent := range []any{v, &encoded.Reply{Message: v, Event: ev}} {
				wire, err := c.Marshal(sent)
				if err != nil {
					t.Fatal(err)
				}
				back := v.ProtoReflect().New().Interface()
				if err := proto.Unmarshal(wire, back); err != nil || !proto.Equal(back, v) {
					t.Fatalf("the proto codec (gateway/server/codec.go, soleEvent) loses %v of %v (%v): send such a message whole",
						protofill.Lost(v, back), v, err)
				}
			}
		}
	}
}
