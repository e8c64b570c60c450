package eventjson

import (
	"testing"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// fuzzTypes are the messages FuzzMarshalMatchesProtojson decodes its
// input into, chosen by the input's first byte: the events, and the
// responses that hold snapshots, summaries and config values.
var fuzzTypes = []func() proto.Message{
	func() proto.Message { return &acpv2.SessionEvent{} },
	func() proto.Message { return &acpv2.GetSessionResponse{} },
	func() proto.Message { return &acpv2.ListSessionsResponse{} },
	func() proto.Message { return &acpv2.WatchResponse{} },
	func() proto.Message { return &acpv2.SetConfigOptionResponse{} },
	func() proto.Message { return &acpv2.SessionUpdate{} },
	func() proto.Message { return &acpv2.PromptRequest{} },
}

// A message decoded from any protobuf encoding is written as protojson
// writes it (the same JSON, and the same bytes but for spacing), or both
// fail alike. The corpus starts with the encodings of the other tests'
// messages.
func FuzzMarshalMatchesProtojson(f *testing.F) {
	seeds := tableEvents(f)
	for _, m := range goMessages() {
		seeds = append(seeds, m)
	}
	for _, m := range fallbackMessages(f) {
		seeds = append(seeds, m)
	}
	for _, m := range seeds {
		if m == nil || !m.ProtoReflect().IsValid() {
			continue
		}
		for sel, newMsg := range fuzzTypes {
			if newMsg().ProtoReflect().Descriptor() != m.ProtoReflect().Descriptor() {
				continue
			}
			wire, err := proto.Marshal(m)
			if err != nil {
				continue // not UTF-8
			}
			f.Add(append([]byte{byte(sel)}, wire...))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		m := fuzzTypes[int(data[0])%len(fuzzTypes)]()
		if proto.Unmarshal(data[1:], m) != nil {
			return
		}
		matchesProtojson(t, m)
	})
}
