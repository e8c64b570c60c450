package statestore_test

import (
	"testing"

	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) statestore.Store { return statestore.NewMemory() })
}
