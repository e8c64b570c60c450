package limits

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine a test started outlives the
// tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
