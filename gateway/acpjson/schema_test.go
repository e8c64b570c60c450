package acpjson

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// TestStringFieldsMatchProtoreflect: setting a plain string field directly
// in the Go struct, as the decoder does, is setting it through protoreflect.
func TestStringFieldsMatchProtoreflect(t *testing.T) {
	t.Parallel()
	n := 0
	for name, in := range infos {
		fields := in.desc.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			j, plain := in.stringField[fd.Number()]
			if want := fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.HasPresence() && fd.ContainingOneof() == nil; plain != want {
				t.Errorf("%s.%s: plain string field %v, want %v", name, fd.Name(), plain, want)
			}
			if !plain {
				continue
			}
			mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
			if err != nil {
				t.Fatal(err)
			}
			viaReflect, direct := mt.New(), mt.New()
			viaReflect.Set(fd, protoreflect.ValueOfString("x"))
			reflect.ValueOf(direct.Interface()).Elem().Field(j).SetString("x")
			if !proto.Equal(viaReflect.Interface(), direct.Interface()) {
				t.Errorf("%s.%s: the Go field %d is not the field", name, fd.Name(), j)
			}
			n++
		}
	}
	if n < 10 {
		t.Fatalf("only %d plain string fields", n)
	}
}
