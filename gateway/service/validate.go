package service

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
)

var (
	valueName  = (&structpb.Value{}).ProtoReflect().Descriptor().FullName()
	structName = (&structpb.Struct{}).ProtoReflect().Descriptor().FullName()
	listName   = (&structpb.ListValue{}).ProtoReflect().Descriptor().FullName()
)

// checkValues refuses a message holding JSON values (google.protobuf
// Struct, ListValue and Value) that the session's log could not keep:
//
//   - a Value that is NaN or infinite: protobuf carries them, but JSON
//     cannot, so once stored they would make the log unreadable to every
//     JSON client;
//   - values nested more than acpjson.MaxDepth arrays and objects deep,
//     as the gateway takes none from agents either: each level is up to
//     three levels of protobuf messages, and an event nested past
//     protobuf's recursion limit could be stored but never read again.
func checkValues(m protoreflect.Message, path string) error {
	return checkValuesAt(m, path, 0)
}

// checkValuesAt is checkValues of m, found within levels JSON arrays and
// objects.
func checkValuesAt(m protoreflect.Message, path string, levels int) error {
	switch m.Descriptor().FullName() {
	case valueName:
		if v, ok := m.Interface().(*structpb.Value); ok {
			if n, isNum := v.GetKind().(*structpb.Value_NumberValue); isNum && (math.IsNaN(n.NumberValue) || math.IsInf(n.NumberValue, 0)) {
				return invalid("%s is %v; JSON numbers must be finite", path, n.NumberValue)
			}
		}
	case structName, listName:
		if levels++; levels > acpjson.MaxDepth {
			return invalid("%s nests JSON arrays and objects more than %d levels deep; flatten it", path, acpjson.MaxDepth)
		}
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		at := path + "." + string(fd.Name())
		switch {
		case fd.IsList():
			for i := 0; i < v.List().Len() && err == nil; i++ {
				err = checkValuesAt(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", at, i), levels)
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					err = checkValuesAt(mv.Message(), fmt.Sprintf("%s[%q]", at, k.String()), levels)
					return err == nil
				})
			}
		default:
			err = checkValuesAt(v.Message(), at, levels)
		}
		return err == nil
	})
	return err
}
