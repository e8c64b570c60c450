// Package protowalk walks the fields of a protobuf message's encoding
// without decoding it, for code that reads a few fields of many messages.
package protowalk

import "google.golang.org/protobuf/encoding/protowire"

// Fields calls f with each field of a message's encoding in order: its
// number, its wire type and its value (a length-delimited field's
// contents, the other types' encoded value). It stops at f's first error,
// and returns a protowire.ParseError where the encoding is malformed (the
// fields before it were given to f).
func Fields(data []byte, f func(num protowire.Number, typ protowire.Type, b []byte) error) error {
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

// Bytes returns the contents of a message's length-delimited field num
// (the last, if it repeats), or nil when it has none.
func Bytes(data []byte, num protowire.Number) ([]byte, error) {
	var v []byte
	err := Fields(data, func(n protowire.Number, typ protowire.Type, b []byte) error {
		if n == num && typ == protowire.BytesType {
			v = b
		}
		return nil
	})
	return v, err
}
