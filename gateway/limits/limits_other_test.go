//go:build !linux

package limits

import (
	"errors"
	"testing"
)

// TestSetupRefusesOffLinux checks that a gateway off Linux refuses every
// limit, naming the flags, rather than running agents without it.
func TestSetupRefusesOffLinux(t *testing.T) {
	for _, l := range []Limits{Defaults, {Memory: 1 << 30}, {NoFile: 64}, {FileSize: 1 << 20}} {
		if _, err := Setup(l); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Setup(%v) = %v, want ErrUnsupported", l, err)
		}
	}
	c, err := Setup(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.New("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Place(1); err != nil {
		t.Errorf("Place: %v", err)
	}
	if !errors.Is(g.Freeze(), ErrNoFreezer) {
		t.Error("Freeze of a group without a cgroup should say ErrNoFreezer")
	}
}
