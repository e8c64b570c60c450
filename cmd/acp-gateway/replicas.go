package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/acp-gateway/acp-gateway/gateway/replica"
)

// readStoreFile sets cfg.store from --store-file. A --store given on the
// command line wins over a store-file of the --config file, and a
// --store-file on the command line over a store of the config file; both
// given at the same level is an error. onCommandLine names the flags given
// on the command line.
func (cfg *serveConfig) readStoreFile(fs *flag.FlagSet, onCommandLine map[string]bool) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case !set["store-file"]:
		return nil
	case set["store"] && onCommandLine["store"] == onCommandLine["store-file"]:
		return errors.New("give --store or --store-file, not both")
	case onCommandLine["store"]:
		cfg.storeFile = "" // the command line wins over the config file
		return nil
	}
	data, err := os.ReadFile(cfg.storeFile)
	if err != nil {
		return fmt.Errorf("--store-file: %v", err)
	}
	cfg.store = strings.TrimSpace(string(data))
	if cfg.store == "" {
		return fmt.Errorf("--store-file %s is empty; want a store URL such as redis://:PASSWORD@HOST:PORT/DB", cfg.storeFile)
	}
	return nil
}

// sharedStore reports whether the store is one several replicas share.
func (cfg *serveConfig) sharedStore() bool {
	return strings.HasPrefix(cfg.store, "redis://") || strings.HasPrefix(cfg.store, "rediss://")
}

// checkReplicas checks how replicas sharing the store trust each other:
// with authentication a shared store needs a replica secret, or the
// explicit opt-out.
func (cfg *serveConfig) checkReplicas() error {
	switch {
	case cfg.replicaSecretFile != "" && cfg.insecureForwarding:
		return errors.New("give --replica-secret-file or --insecure-forwarding, not both")
	case cfg.sharedStore() && cfg.authConfigured() && cfg.replicaSecretFile == "" && !cfg.insecureForwarding:
		return errors.New("with a redis:// store and authentication, give every replica --replica-secret-file FILE, the same secret " +
			"(openssl rand -hex 32 > FILE), so that a lease forged in Redis cannot send users' requests and tokens to another address; " +
			"or the unsafe --insecure-forwarding")
	}
	return nil
}

// replicaSecret loads --replica-secret-file, and warns of forwarding that
// trusts the store.
func (cfg *serveConfig) replicaSecret(log *slog.Logger) (*replica.Secret, error) {
	if cfg.replicaSecretFile != "" {
		secret, err := replica.LoadSecret(cfg.replicaSecretFile)
		if err != nil {
			return nil, fmt.Errorf("--replica-secret-file: %w", err)
		}
		return secret, nil
	}
	switch {
	case !cfg.sharedStore():
		// No other replica shares the store: nothing is forwarded.
		if cfg.insecureForwarding {
			log.Info("--insecure-forwarding has no effect: no other replica shares the store (only a redis:// store is shared), so no request is forwarded")
		}
	case cfg.insecureForwarding && cfg.authConfigured():
		log.Warn("unsafe: --insecure-forwarding sends requests, with their callers' bearer tokens, to whatever replica address the store names; " +
			"anyone who can write to the store can have them: give --replica-secret-file")
	default:
		msg := "no --replica-secret-file: requests are forwarded to whatever replica address the store names; " +
			"anyone who can write to the store can have them"
		if cfg.insecureForwarding {
			msg += " (--insecure-forwarding has no effect: without authentication there are no bearer tokens to forward)"
		}
		log.Warn(msg)
	}
	return nil, nil
}
