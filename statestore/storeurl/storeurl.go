// Package storeurl opens the state store a URL names: memory:, bolt:PATH,
// or redis://HOST:PORT/DB (rediss:// for TLS).
package storeurl

import (
	"context"
	"errors"
	"strings"

	"github.com/acp-gateway/acp-gateway/statestore"
	"github.com/acp-gateway/acp-gateway/statestore/boltstore"
	"github.com/acp-gateway/acp-gateway/statestore/redisstore"
)

// Check reports what is wrong with a store URL, and returns the URL as it
// may be shown (a Redis password hidden).
func Check(raw string) (string, error) {
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

// Options configure Open.
type Options struct {
	// Store is passed to whichever store the URL names.
	Store statestore.Options
	// RedisPrefix, when set, prefixes a Redis store's keys.
	RedisPrefix string
}

// Open opens the store raw names.
func Open(ctx context.Context, raw string, opts Options) (statestore.Store, error) {
	if _, err := Check(raw); err != nil {
		return nil, err
	}
	switch {
	case raw == "memory:":
		return statestore.NewMemory(opts.Store), nil
	case strings.HasPrefix(raw, "bolt:"):
		return boltstore.Open(strings.TrimPrefix(raw, "bolt:"), opts.Store)
	default:
		return redisstore.Open(ctx, raw, redisstore.Options{Options: opts.Store, Prefix: opts.RedisPrefix})
	}
}
