package egress

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine a test started (a proxy's
// connection, a listener) outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
