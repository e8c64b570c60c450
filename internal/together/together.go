// Package together allocates two or three values in one object, for
// protobuf messages that always come with their oneof wrappers (and
// patches with their values): the generated types' literals take an
// allocation each. A value so made keeps the others of its object alive
// while it lives.
package together

type (
	two[A, B any] struct {
		a A
		b B
	}
	three[A, B, C any] struct {
		a A
		b B
		c C
	}
)

// Two returns two new values in one object, after link has pointed one at
// the other as the generated types' literals would.
func Two[A, B any](link func(*A, *B)) (*A, *B) {
	x := new(two[A, B])
	link(&x.a, &x.b)
	return &x.a, &x.b
}

// Three returns the first and last of three new values in one object,
// linked by link.
func Three[A, B, C any](link func(*A, *B, *C)) (*A, *C) {
	x := new(three[A, B, C])
	link(&x.a, &x.b, &x.c)
	return &x.a, &x.c
}
