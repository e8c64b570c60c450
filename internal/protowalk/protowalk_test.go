package protowalk_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/acp-gateway/acp-gateway/internal/protowalk"
)

func TestFieldsAndBytes(t *testing.T) {
	t.Parallel()
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.VarintType)
	msg = protowire.AppendVarint(msg, 300)
	msg = protowire.AppendTag(msg, 2, protowire.BytesType)
	msg = protowire.AppendBytes(msg, []byte("first"))
	msg = protowire.AppendTag(msg, 2, protowire.BytesType)
	msg = protowire.AppendBytes(msg, []byte("last"))

	var nums []protowire.Number
	var values [][]byte
	if err := protowalk.Fields(msg, func(num protowire.Number, typ protowire.Type, b []byte) error {
		nums = append(nums, num)
		values = append(values, b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(nums) != 3 || nums[0] != 1 || nums[2] != 2 || !bytes.Equal(values[1], []byte("first")) {
		t.Fatalf("fields %v, values %q", nums, values)
	}
	if v, _ := protowire.ConsumeVarint(values[0]); v != 300 {
		t.Errorf("varint field value %d", v)
	}
	if b, err := protowalk.Bytes(msg, 2); err != nil || string(b) != "last" {
		t.Errorf("Bytes(2) = %q, %v; want the last", b, err)
	}
	if b, err := protowalk.Bytes(msg, 7); err != nil || b != nil {
		t.Errorf("Bytes of a missing field = %q, %v", b, err)
	}
	// Malformed: a length past the end.
	bad := append(protowire.AppendTag(nil, 3, protowire.BytesType), 9, 'x')
	if _, err := protowalk.Bytes(append(msg, bad...), 2); err == nil {
		t.Error("no error for a truncated field")
	}
}
