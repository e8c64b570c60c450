package redisstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine a test started (a waiter on
// a stream, a client's) outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
