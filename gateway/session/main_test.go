package session

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine a test started (a session's
// writer, a subscription, a timer's callback) outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
