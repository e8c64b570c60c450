package acpjson

import (
	"reflect"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// reflectMessage is the message at p of table t, through protoreflect.
func reflectMessage(t *table, p unsafe.Pointer) protoreflect.Message {
	return reflect.NewAt(t.typ, p).Interface().(proto.Message).ProtoReflect()
}
