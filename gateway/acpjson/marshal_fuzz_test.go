package acpjson_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
)

// FuzzDecodedUpdateMarshals feeds arbitrary agent output to the decoder and
// checks that whatever it accepts (or keeps as unknown) can be sent on to
// clients: as protobuf and as Connect's protojson, which refuse what they
// cannot hold (invalid UTF-8, NaN and infinite numbers). An update that
// cannot be marshalled would break every stream that carries it.
func FuzzDecodedUpdateMarshals(f *testing.F) {
	for _, c := range loadGolden(f) {
		f.Add([]byte(c.Input), uint8(c.Version))
	}
	f.Add([]byte("{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"\xff\"}}"), uint8(1))
	f.Add([]byte(`{"sessionUpdate":"tool_call","toolCallId":"c","rawInput":{"n":1e400,"m":-1e400}}`), uint8(0))
	f.Add([]byte(`{"sessionUpdate":"_x","a":"\ud800"}`), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, ver uint8) {
		u, err := acpjson.DecodeUpdate(data, acpjson.Version(1+ver%2))
		if err != nil {
			if u = acpjson.KeepUnknown(data); u == nil {
				return
			}
		}
		if _, err := proto.Marshal(u); err != nil {
			t.Fatalf("proto.Marshal: %v\ninput: %q", err, data)
		}
		if _, err := protojson.Marshal(u); err != nil {
			t.Fatalf("protojson.Marshal: %v\ninput: %q", err, data)
		}
	})
}
