package statestore_test

import (
	"testing"

	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(_ *testing.T, opts statestore.Options) statestore.Store { return statestore.NewMemory(opts) })
}
