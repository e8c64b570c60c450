package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/boltstore"
	"github.com/acp-gateway/acp-gateway/statestore/redisstore"
)

// defaultBoltPath is where the default store lives:
// $XDG_STATE_HOME/acp-gateway/sessions.db, or
// ~/.local/state/acp-gateway/sessions.db.
func defaultBoltPath() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "acp-gateway-sessions.db"
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "acp-gateway", "sessions.db")
}

// checkStoreURL reports what is wrong with a --store value, and returns
// the value as it may be shown (a Redis password hidden).
func checkStoreURL(raw string) (string, error) {
	switch {
	case raw == "memory:":
		return raw, nil
	case strings.HasPrefix(raw, "bolt:"):
		if strings.TrimPrefix(raw, "bolt:") == "" {
			return "", errors.New("bolt: needs a file path, as in bolt:/var/lib/acp-gateway/sessions.db")
		}
		return raw, nil
	case strings.HasPrefix(raw, "redis://"), strings.HasPrefix(raw, "rediss://"):
		shown, _, err := redisstore.ParseURL(raw)
		return shown, err
	}
	return "", errors.New("want memory:, bolt:PATH or redis://HOST:PORT/DB")
}

// openStore opens the store a checked --store value names.
func openStore(ctx context.Context, raw string, opts statestore.Options) (statestore.Store, error) {
	switch {
	case raw == "memory:":
		return statestore.NewMemory(opts), nil
	case strings.HasPrefix(raw, "bolt:"):
		return boltstore.Open(strings.TrimPrefix(raw, "bolt:"), opts)
	default:
		return redisstore.Open(ctx, raw, redisstore.Options{Options: opts})
	}
}
