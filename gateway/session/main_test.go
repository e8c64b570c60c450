package session

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
)

// TestMain fails the package when a goroutine a test started (a session's
// writer, a subscription, a timer's callback) outlives the tests.
func TestMain(m *testing.M) {
	agentsim.ServeIfCommanded() // the fence tests' agents
	goleak.VerifyTestMain(m)
}
