package pbstruct

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// sample is an object of every kind of value, nested.
func sample(t testing.TB) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{
		"s": "text with \"quotes\" and ünïcode", "n": 42.5, "zero": 0.0, "neg": -1e300, "t": true, "f": false, "null": nil,
		"empty": "", "list": []any{1.0, "two", nil, true, []any{}, map[string]any{}, []any{"in", []any{2.0}}, map[string]any{"k": []any{true}}}, "obj": map[string]any{"a": map[string]any{"b": []any{"c"}}},
		"": "empty key",
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Fields["inf"] = structpb.NewNumberValue(math.Inf(1))
	// Lengths of two and three bytes, the contents moved along (one member
	// a level, for TestEncodingDecodesToTheMessage's byte comparison).
	for k, v := range map[string]any{
		"long":     strings.Repeat("l", 200),
		"longer":   map[string]any{"in": map[string]any{"s": strings.Repeat("m", 20000)}},
		"longlist": []any{strings.Repeat("n", 130), []any{strings.Repeat("o", 17000)}},
	} {
		if s.Fields[k], err = structpb.NewValue(v); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// The encoding decodes to the message, for a Struct of every kind of
// value; for one member it is proto.Marshal's, byte for byte.
func TestEncodingDecodesToTheMessage(t *testing.T) {
	s := sample(t)
	b, err := AppendStruct([]byte("prefix"), s)
	if err != nil {
		t.Fatal(err)
	}
	back := &structpb.Struct{}
	if err := proto.Unmarshal(b[len("prefix"):], back); err != nil || !proto.Equal(back, s) {
		t.Fatalf("decodes to %v (%v)", back, err)
	}
	for k, v := range s.GetFields() {
		one := &structpb.Struct{Fields: map[string]*structpb.Value{k: v}}
		got, err := AppendStruct(nil, one)
		want, _ := proto.Marshal(one)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("member %q: %x, proto.Marshal %x (%v)", k, got, want, err)
		}
		gotV, _ := AppendValue(nil, v)
		wantV, _ := proto.Marshal(v)
		if !bytes.Equal(gotV, wantV) {
			t.Fatalf("value %q: %x, proto.Marshal %x", k, gotV, wantV)
		}
	}
	if b, err := AppendValue(nil, &structpb.Value{}); err != nil || len(b) != 0 {
		t.Fatalf("a Value of no kind: %x, %v", b, err)
	}
}

// What proto.Marshal refuses is refused, and what this package does not
// encode says so.
func TestRefusals(t *testing.T) {
	bad := structpb.NewStringValue("not UTF-8: \xff")
	if _, err := AppendValue(nil, bad); err == nil {
		t.Fatal("invalid UTF-8 encoded")
	}
	if _, err := AppendStruct(nil, &structpb.Struct{Fields: map[string]*structpb.Value{"\xff": structpb.NewNullValue()}}); err == nil {
		t.Fatal("an invalid UTF-8 key encoded")
	}
	withNil := &structpb.Struct{Fields: map[string]*structpb.Value{"k": nil}}
	if _, err := AppendStruct(nil, withNil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("a nil value: %v, want ErrUnsupported", err)
	}
	unknown := structpb.NewBoolValue(true)
	unknown.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01})
	if _, err := AppendValue(nil, unknown); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("unknown fields: %v, want ErrUnsupported", err)
	}
}

// BenchmarkAppendStruct encodes the sample's short values ("short") and
// its long ones, whose lengths take two and three bytes ("long").
func BenchmarkAppendStruct(b *testing.B) {
	all := sample(b)
	short := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	long := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range all.Fields {
		if strings.HasPrefix(k, "long") {
			long.Fields[k] = v
		} else {
			short.Fields[k] = v
		}
	}
	var buf []byte
	for _, s := range []struct {
		name string
		s    *structpb.Struct
	}{{"short", short}, {"long", long}} {
		for _, c := range []struct {
			name string
			f    func(*structpb.Struct) ([]byte, error)
		}{
			// Into a buffer kept from run to run, as the session's encoder
			// appends into a pooled one.
			{"pbstruct", func(s *structpb.Struct) (b []byte, err error) {
				buf, err = AppendStruct(buf[:0], s)
				return buf, err
			}},
			{"proto", func(s *structpb.Struct) (b []byte, err error) {
				buf, err = proto.MarshalOptions{}.MarshalAppend(buf[:0], s)
				return buf, err
			}},
		} {
			b.Run(s.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.f(s.s); err != nil {
						b.Fatal(fmt.Sprint(err))
					}
				}
			})
		}
	}
}
