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

func unsafeAdd(p unsafe.Pointer, off uintptr) unsafe.Pointer { return unsafe.Add(p, off) }

func writeString(s *slot, f unsafe.Pointer, v string) {
	if s.opt {
		*(**string)(f) = &v
	} else {
		*(*string)(f) = v
	}
}

func writeBool(s *slot, f unsafe.Pointer, v bool) {
	if s.opt {
		*(**bool)(f) = &v
	} else {
		*(*bool)(f) = v
	}
}
