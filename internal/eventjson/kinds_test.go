package eventjson

import (
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// kindsFile declares, in proto3, a field of each kind the gateway's own
// messages lack (other integers, float, bytes, maps, repeated scalars and
// enums, a oneof declared after a field of higher number), and in proto2 what is left to
// protojson (required fields, groups, extensions) and fields with
// defaults.
const kindsFile = `
name: "kinds.proto" package: "kinds" syntax: "proto3"
dependency: "google/protobuf/struct.proto"
enum_type { name: "Color" value { name: "RED" number: 0 } value { name: "GREEN" number: 1 } value { name: "FAR" number: 1000 } }
message_type {
  name: "All"
  field { name: "i32" number: 1 type: TYPE_INT32 label: LABEL_OPTIONAL json_name: "i32" }
  field { name: "s32" number: 2 type: TYPE_SINT32 label: LABEL_OPTIONAL json_name: "s32" }
  field { name: "sf32" number: 3 type: TYPE_SFIXED32 label: LABEL_OPTIONAL json_name: "sf32" }
  field { name: "u32" number: 4 type: TYPE_UINT32 label: LABEL_OPTIONAL json_name: "u32" }
  field { name: "f32" number: 5 type: TYPE_FIXED32 label: LABEL_OPTIONAL json_name: "f32" }
  field { name: "i64" number: 6 type: TYPE_INT64 label: LABEL_OPTIONAL json_name: "i64" }
  field { name: "s64" number: 7 type: TYPE_SINT64 label: LABEL_OPTIONAL json_name: "s64" }
  field { name: "sf64" number: 8 type: TYPE_SFIXED64 label: LABEL_OPTIONAL json_name: "sf64" }
  field { name: "f64" number: 9 type: TYPE_FIXED64 label: LABEL_OPTIONAL json_name: "f64" }
  field { name: "fl" number: 10 type: TYPE_FLOAT label: LABEL_OPTIONAL json_name: "fl" }
  field { name: "by" number: 11 type: TYPE_BYTES label: LABEL_OPTIONAL json_name: "by" }
  field { name: "color" number: 12 type: TYPE_ENUM type_name: ".kinds.Color" label: LABEL_OPTIONAL json_name: "color" }
  field { name: "colors" number: 13 type: TYPE_ENUM type_name: ".kinds.Color" label: LABEL_REPEATED json_name: "colors" }
  field { name: "floats" number: 14 type: TYPE_FLOAT label: LABEL_REPEATED json_name: "floats" }
  field { name: "int64s" number: 15 type: TYPE_INT64 label: LABEL_REPEATED json_name: "int64s" }
  field { name: "blobs" number: 16 type: TYPE_BYTES label: LABEL_REPEATED json_name: "blobs" }
  field { name: "nulls" number: 17 type: TYPE_ENUM type_name: ".google.protobuf.NullValue" label: LABEL_REPEATED json_name: "nulls" }
  field { name: "by_name" number: 18 type: TYPE_MESSAGE label: LABEL_REPEATED type_name: ".kinds.All.ByNameEntry" json_name: "byName" }
  field { name: "by_number" number: 19 type: TYPE_MESSAGE label: LABEL_REPEATED type_name: ".kinds.All.ByNumberEntry" json_name: "byNumber" }
  field { name: "by_flag" number: 20 type: TYPE_MESSAGE label: LABEL_REPEATED type_name: ".kinds.All.ByFlagEntry" json_name: "byFlag" }
  field { name: "by_id" number: 21 type: TYPE_MESSAGE label: LABEL_REPEATED type_name: ".kinds.All.ByIdEntry" json_name: "byId" }
  field { name: "between" number: 23 type: TYPE_STRING label: LABEL_OPTIONAL json_name: "between" }
  field { name: "a" number: 22 type: TYPE_STRING label: LABEL_OPTIONAL oneof_index: 0 json_name: "a" }
  field { name: "b" number: 24 type: TYPE_BOOL label: LABEL_OPTIONAL oneof_index: 0 json_name: "b" }
  field { name: "custom" number: 25 type: TYPE_STRING label: LABEL_OPTIONAL json_name: "cus\"tom" }
  field { name: "self" number: 26 type: TYPE_MESSAGE type_name: ".kinds.All" label: LABEL_OPTIONAL json_name: "self" }
  field { name: "value" number: 27 type: TYPE_MESSAGE type_name: ".google.protobuf.Value" label: LABEL_OPTIONAL json_name: "value" }
  oneof_decl { name: "split" }
  nested_type { name: "ByNameEntry" options { map_entry: true }
    field { name: "key" number: 1 type: TYPE_STRING label: LABEL_OPTIONAL json_name: "key" }
    field { name: "value" number: 2 type: TYPE_INT32 label: LABEL_OPTIONAL json_name: "value" } }
  nested_type { name: "ByNumberEntry" options { map_entry: true }
    field { name: "key" number: 1 type: TYPE_SINT64 label: LABEL_OPTIONAL json_name: "key" }
    field { name: "value" number: 2 type: TYPE_STRING label: LABEL_OPTIONAL json_name: "value" } }
  nested_type { name: "ByFlagEntry" options { map_entry: true }
    field { name: "key" number: 1 type: TYPE_BOOL label: LABEL_OPTIONAL json_name: "key" }
    field { name: "value" number: 2 type: TYPE_BYTES label: LABEL_OPTIONAL json_name: "value" } }
  nested_type { name: "ByIdEntry" options { map_entry: true }
    field { name: "key" number: 1 type: TYPE_FIXED32 label: LABEL_OPTIONAL json_name: "key" }
    field { name: "value" number: 2 type: TYPE_MESSAGE type_name: ".kinds.All" label: LABEL_OPTIONAL json_name: "value" } }
}`

const legacyFile = `
name: "legacy.proto" package: "legacy" syntax: "proto2"
message_type {
  name: "Defaults"
  field { name: "n" number: 1 type: TYPE_INT32 label: LABEL_OPTIONAL default_value: "7" json_name: "n" }
  field { name: "s" number: 2 type: TYPE_STRING label: LABEL_OPTIONAL default_value: "d" json_name: "s" }
}
message_type {
  name: "Required"
  field { name: "r" number: 1 type: TYPE_INT32 label: LABEL_REQUIRED json_name: "r" }
}
message_type {
  name: "Grouped"
  field { name: "g" number: 1 type: TYPE_GROUP type_name: ".legacy.Grouped.G" label: LABEL_OPTIONAL json_name: "g" }
  nested_type { name: "G" field { name: "x" number: 2 type: TYPE_INT32 label: LABEL_OPTIONAL json_name: "x" } }
}
message_type {
  name: "Extended"
  field { name: "n" number: 1 type: TYPE_INT32 label: LABEL_OPTIONAL json_name: "n" }
  extension_range { start: 100 end: 200 }
}
message_type {
  name: "Holder"
  field { name: "d" number: 1 type: TYPE_MESSAGE type_name: ".legacy.Defaults" label: LABEL_OPTIONAL json_name: "d" }
  field { name: "r" number: 2 type: TYPE_MESSAGE type_name: ".legacy.Required" label: LABEL_OPTIONAL json_name: "r" }
}`

// newFile builds a file from its descriptor in text form.
func newFile(t *testing.T, text string) protoreflect.FileDescriptor {
	t.Helper()
	var fdp descriptorpb.FileDescriptorProto
	if err := prototext.Unmarshal([]byte(text), &fdp); err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(&fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// newMessage makes a message of md from its protojson.
func newMessage(t *testing.T, md protoreflect.MessageDescriptor, js string) proto.Message {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return m
}

// Every kind of field is written as protojson writes it, maps with their
// keys in protojson's order.
func TestKindsMatchProtojson(t *testing.T) {
	all := newFile(t, kindsFile).Messages().ByName("All")
	for _, js := range []string{
		`{}`,
		`{"i32":-2147483648,"s32":-1,"sf32":2147483647,"u32":4294967295,"f32":1,"i64":"-9223372036854775808","s64":"-1","sf64":"9223372036854775807","f64":"18446744073709551615"}`,
		`{"fl":1e-6,"floats":[0,-0,1e-7,1e21,1e20,3.4028235e38,1.0000001,0.1,"NaN","Infinity","-Infinity",1.4e-45,9.999999e-7]}`,
		`{"by":"AAEC/f7/","blobs":["","aGk=","YQ=="],"int64s":["0","-1","1"]}`,
		`{"color":"FAR","colors":["RED","GREEN",5,-1,"FAR",1000,999]}`,
		`{"color":1,"nulls":[null,null]}`,
		`{"byName":{"z":1,"a":0,"":-1,"é":2,"Z":3},"byNumber":{"-5":"x","3":"","10":"s\u0000","-40":"y"}}`,
		`{"byFlag":{"true":"AQ==","false":""},"byId":{"4294967295":{"i32":1},"0":{},"7":{"byId":{"1":{}}}}}`,
		`{"a":"","between":"x"}`,
		`{"b":false}`,
		`{"cus\"tom":"quoted name","self":{"self":{"b":true}}}`,
	} {
		m := newMessage(t, all, js)
		matchesProtojson(t, m)
		if _, ok := appendFast(nil, m); !ok {
			t.Fatalf("%s: left to protojson", js)
		}
	}
	// A dynamic message of a well-known type is not its Go type: left to
	// protojson.
	m := newMessage(t, all, `{"value":{"k":[1,null]}}`)
	matchesProtojson(t, m)
	if _, ok := appendFast(nil, m); ok {
		t.Fatal("a dynamic Value written here, not by protojson")
	}
	// A float32 just below 1e-6 as float32 and not as float64: written
	// 'f' or 'e' as protojson compares it.
	for _, f := range []float32{1e-6, math.Nextafter32(1e-6, 0), 1e21, math.Nextafter32(1e21, 0)} {
		m := dynamicpb.NewMessage(all)
		m.Set(all.Fields().ByName("fl"), protoreflect.ValueOfFloat32(f))
		matchesProtojson(t, m)
	}
}

// proto2 fields are written when set, at their defaults too; messages
// with required fields, groups or extension ranges are left to protojson.
func TestProto2(t *testing.T) {
	file := newFile(t, legacyFile)
	msgs := file.Messages()
	for _, js := range []string{`{}`, `{"n":0}`, `{"n":7,"s":"d"}`, `{"s":""}`} {
		m := newMessage(t, msgs.ByName("Defaults"), js)
		matchesProtojson(t, m)
		if _, ok := appendFast(nil, m); !ok {
			t.Fatalf("%s: left to protojson", js)
		}
	}
	for _, c := range []struct{ name, js string }{
		{"Required", `{"r":1}`},
		{"Grouped", `{}`},
		{"Extended", `{"n":1}`},
		{"Holder", `{"d":{},"r":{"r":0}}`},
	} {
		m := newMessage(t, msgs.ByName(protoreflect.Name(c.name)), c.js)
		matchesProtojson(t, m)
		if _, ok := appendFast(nil, m); ok {
			t.Fatalf("%s: written here, not by protojson", c.name)
		}
	}
	// A missing required field is protojson's error.
	holder := msgs.ByName("Holder")
	m := dynamicpb.NewMessage(holder)
	m.Set(holder.Fields().ByName("r"), protoreflect.ValueOfMessage(dynamicpb.NewMessage(msgs.ByName("Required"))))
	matchesProtojson(t, m)
}
