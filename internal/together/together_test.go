package together_test

import (
	"testing"

	"github.com/acp-gateway/acp-gateway/internal/together"
)

type outer struct{ in *inner }
type inner struct{ v *int }

func TestOneAllocationLinked(t *testing.T) {
	var o *outer
	var v *int
	allocs := testing.AllocsPerRun(100, func() {
		o, _ = together.Two(func(o *outer, in *inner) { o.in = in })
		var in *inner
		in, v = together.Three(func(in *inner, _ *outer, v *int) { in.v = v; *v = 7 })
		_ = in
	})
	if allocs != 2 {
		t.Errorf("%v allocations for a Two and a Three, want 2", allocs)
	}
	if o.in == nil || *v != 7 {
		t.Errorf("not linked: %+v, %d", o, *v)
	}
}
