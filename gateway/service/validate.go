package service

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

var valueName = (&structpb.Value{}).ProtoReflect().Descriptor().FullName()

// checkFinite refuses a message holding a google.protobuf.Value that is NaN
// or infinite: protobuf carries them, but JSON cannot, so once stored they
// would make the session's log unreadable to every JSON client.
func checkFinite(m protoreflect.Message, path string) error {
	if m.Descriptor().FullName() == valueName {
		if v, ok := m.Interface().(*structpb.Value); ok {
			if n, isNum := v.GetKind().(*structpb.Value_NumberValue); isNum && (math.IsNaN(n.NumberValue) || math.IsInf(n.NumberValue, 0)) {
				return invalid("%s is %v; JSON numbers must be finite", path, n.NumberValue)
			}
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
				err = checkFinite(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", at, i))
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					err = checkFinite(mv.Message(), fmt.Sprintf("%s[%q]", at, k.String()))
					return err == nil
				})
			}
		default:
			err = checkFinite(v.Message(), at)
		}
		return err == nil
	})
	return err
}
