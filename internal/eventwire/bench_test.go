package eventwire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// BenchmarkGetNewEvent is the cache's own cost for an event that comes
// without its encoding (a session hands its own events' bytes along, so
// the cache serves the others), asked for by two streams; the marshal is
// left out.
func BenchmarkGetNewEvent(b *testing.B) {
	wire := []byte("x")
	c := New(DefaultEntries, DefaultBytes, func(proto.Message) ([]byte, error) { return wire, nil })
	b.ReportAllocs()
	for b.Loop() {
		ev := &acpv2.SessionEvent{Seq: 1}
		for range 2 {
			if got, err := c.Get(ev); err != nil || len(got) != 1 {
				b.Fatal(got, err)
			}
		}
	}
}
