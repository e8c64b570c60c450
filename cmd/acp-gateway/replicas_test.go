package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// With authentication, a redis:// store needs a replica secret, or the
// explicit opt-out, and serve says so.
func TestSharedStoreWithAuthNeedsAReplicaSecret(t *testing.T) {
	t.Parallel()
	secret := writeTemp(t, "secret", strings.Repeat("s", 32))
	store := "redis://127.0.0.1:6379/9"
	storeFile := writeTemp(t, "store", store+"\n")
	for _, a := range [][]string{{"--auth-tokens", "/etc/tokens"}, {"--oidc-issuer", "https://issuer.example", "--oidc-audience", "acp"}} {
		for _, s := range [][]string{{"--store", store}, {"--store-file", storeFile}} {
			args := slices.Concat(a, s, []string{"--any-cwd"})
			_, err := parseServe(args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "--replica-secret-file FILE") || !strings.Contains(err.Error(), "--insecure-forwarding") {
				t.Errorf("serve %q: %v; want an error naming --replica-secret-file FILE and --insecure-forwarding", args, err)
			}
			var stderr bytes.Buffer
			if code := run(context.Background(), append([]string{"serve"}, args...), io.Discard, &stderr); code != exitUsage || strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("serve %q: exit %d, %q; want %d and one line", args, code, stderr.String(), exitUsage)
			}
			for _, fix := range [][]string{{"--replica-secret-file", secret}, {"--insecure-forwarding"}} {
				if _, err := parseServe(slices.Concat(args, fix), io.Discard); err != nil {
					t.Errorf("serve %q %q: %v", args, fix, err)
				}
			}
			if _, err := parseServe(slices.Concat(args, []string{"--replica-secret-file", secret, "--insecure-forwarding"}), io.Discard); err == nil || !strings.Contains(err.Error(), "not both") {
				t.Errorf("both the secret and --insecure-forwarding: %v", err)
			}
		}
		// A store no other replica shares needs none.
		if _, err := parseServe(slices.Concat(a, []string{"--store", "memory:", "--any-cwd"}), io.Discard); err != nil {
			t.Errorf("serve %q on a memory store: %v", a, err)
		}
	}
	// Without authentication neither is needed.
	if _, err := parseServe([]string{"--store", store}, io.Discard); err != nil {
		t.Errorf("serve on Redis without authentication: %v", err)
	}
}

func TestStoreFile(t *testing.T) {
	t.Parallel()
	const url = "redis://:hunter2pw@redis.example:6379/0"
	file := writeTemp(t, "store", "\n"+url+"\n")
	cfg, err := parseServe([]string{"--store-file", file}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.store != url || strings.Contains(cfg.storeShown, "hunter2pw") || !slices.Contains(gatewayFiles(cfg), file) {
		t.Errorf("--store-file: store %q, shown %q, hidden from agents %q", cfg.store, cfg.storeShown, gatewayFiles(cfg))
	}
	withStore := writeTemp(t, "store.yaml", "store: \"memory:\"\n")
	withFile := writeTemp(t, "file.yaml", "store-file: "+file+"\n")
	withBoth := writeTemp(t, "both.yaml", "store: \"memory:\"\nstore-file: "+file+"\n")
	for _, c := range []struct {
		args []string
		want string // the store, or the start of the error
	}{
		{[]string{"--store-file", file, "--config", withStore}, url},      // the command line wins
		{[]string{"--store", "memory:", "--config", withFile}, "memory:"}, // the command line wins
		{[]string{"--config", withFile}, url},
		{[]string{"--store", "memory:", "--store-file", file}, "give --store or --store-file, not both"},
		{[]string{"--config", withBoth}, "give --store or --store-file, not both"},
		{[]string{"--store-file", writeTemp(t, "empty", "\n")}, "--store-file"},
		{[]string{"--store-file", filepath.Join(t.TempDir(), "none")}, "--store-file"},
		{[]string{"--store-file", writeTemp(t, "bad", "redis://:hunter2pw@redis.example:6379/x\n")}, "--store-file"},
	} {
		cfg, err := parseServe(c.args, io.Discard)
		switch {
		case err != nil && !strings.HasPrefix(err.Error(), c.want):
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		case err != nil && strings.Contains(err.Error(), "hunter2pw"):
			t.Errorf("%q: the error shows the password: %v", c.args, err)
		case err == nil && cfg.store != c.want:
			t.Errorf("%q: store %q, want %q", c.args, cfg.store, c.want)
		}
	}
}

// Neither the Redis URL's password nor the replica secret is ever shown.
func TestStoreAndReplicaSecretsAreNotShown(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		// Nothing listens on port 1: serve fails, naming the store.
		"unreachable store": {"--store-file", writeTemp(t, "store", "redis://:hunter2pw@127.0.0.1:1/0?dial_timeout=100ms&max_retries=-1")},
		"short secret":      {"--store", "memory:", "--replica-secret-file", writeTemp(t, "secret", "hunter2pw-too-short\n")},
		"missing secret":    {"--store", "memory:", "--replica-secret-file", filepath.Join(t.TempDir(), "none")},
	} {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		code := run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), &stdout, &stderr)
		cancel()
		if code == 0 {
			t.Errorf("%s: serve started", name)
		}
		if name != "unreachable store" && (code != exitUsage || !strings.Contains(stderr.String(), "--replica-secret-file")) {
			t.Errorf("%s: exit %d, %q; want %d naming --replica-secret-file", name, code, stderr.String(), exitUsage)
		}
		if out := stdout.String() + stderr.String(); strings.Contains(out, "hunter2pw") {
			t.Errorf("%s: the output shows the secret:\n%s", name, out)
		}
	}
}

// Forwarding that trusts the store is logged as such; the secret file is
// hidden from agents.
func TestForwardingWithoutASecretIsWarnedOf(t *testing.T) {
	t.Parallel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "acpgw-cmdtest-" + hex.EncodeToString(b[:]) + ":"
	tokens := writeTemp(t, "tokens", "tok-alice-0123456789 alice\n")
	secret := writeTemp(t, "secret", strings.Repeat("s", 32)+"\n")
	for _, c := range []struct {
		args []string
		warn string // "": no warning of forwarding
	}{
		{[]string{"--store", testutil.RedisURL()}, `"msg":"no --replica-secret-file: requests are forwarded to whatever replica address the store names`},
		{[]string{"--store", testutil.RedisURL(), "--auth-tokens", tokens, "--any-cwd", "--sandbox", "none", "--insecure-forwarding"}, `"msg":"unsafe: --insecure-forwarding`},
		{[]string{"--store", testutil.RedisURL(), "--auth-tokens", tokens, "--any-cwd", "--sandbox", "none", "--replica-secret-file", secret}, ""},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		_, logs, exited := serveLogs(t, ctx, append(c.args, "--redis-prefix", prefix)...)
		if c.warn != "" && !strings.Contains(logs.String(), c.warn) {
			t.Errorf("%q: no warning %s:\n%s", c.args, c.warn, logs)
		}
		if c.warn == "" && (strings.Contains(logs.String(), "replica address the store names") || logLine(logs, "serving")["replica_secret"] != true) {
			t.Errorf("%q: warned, or the serving line does not say replica_secret:\n%s", c.args, logs)
		}
		stopServe(t, cancel, exited)
	}
	cfg, err := parseServe([]string{"--store", testutil.RedisURL(), "--replica-secret-file", secret}, io.Discard)
	if err != nil || !slices.Contains(gatewayFiles(cfg), secret) {
		t.Errorf("the replica secret file is not hidden from agents: %v %q", err, gatewayFiles(cfg))
	}
}

// --insecure-forwarding is warned of as sending bearer tokens only where
// it does: with a shared store and authentication. Elsewhere it is said
// to change nothing.
func TestInsecureForwardingIsWarnedOfOnlyWhereItForwardsTokens(t *testing.T) {
	t.Parallel()
	tokens := writeTemp(t, "tokens", "tok-alice-0123456789 alice\n")
	bolt := "bolt:" + filepath.Join(t.TempDir(), "sessions.db")
	const redis = "redis://127.0.0.1:6379/9"
	const (
		tokensWarning = `"level":"WARN","msg":"unsafe: --insecure-forwarding sends requests, with their callers' bearer tokens`
		noSecret      = `"level":"WARN","msg":"no --replica-secret-file: requests are forwarded to whatever replica address the store names`
		noEffect      = `--insecure-forwarding has no effect`
	)
	for _, c := range []struct {
		args       []string
		want, none []string // in the log, and not
	}{
		{[]string{"--store", "memory:", "--insecure-forwarding"}, []string{`"level":"INFO","msg":"` + noEffect}, []string{"WARN"}},
		{[]string{"--store", bolt, "--insecure-forwarding"}, []string{`"level":"INFO","msg":"` + noEffect}, []string{"WARN"}},
		{[]string{"--store", bolt, "--auth-tokens", tokens, "--any-cwd", "--insecure-forwarding"}, []string{`"level":"INFO","msg":"` + noEffect}, []string{"WARN"}},
		{[]string{"--store", redis, "--insecure-forwarding"}, []string{noSecret, noEffect}, []string{tokensWarning}},
		{[]string{"--store", redis, "--auth-tokens", tokens, "--any-cwd", "--insecure-forwarding"}, []string{tokensWarning}, []string{noEffect, noSecret}},
		{[]string{"--store", redis}, []string{noSecret}, []string{noEffect, tokensWarning}},
		{[]string{"--store", bolt}, nil, []string{"forward"}},
	} {
		cfg, err := parseServe(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		logs := &testutil.SyncBuffer{}
		if _, err := cfg.replicaSecret(slog.New(slog.NewJSONHandler(logs, nil))); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		for _, want := range c.want {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("%q: the log lacks %s:\n%s", c.args, want, logs)
			}
		}
		for _, none := range c.none {
			if strings.Contains(logs.String(), none) {
				t.Errorf("%q: the log has %s:\n%s", c.args, none, logs)
			}
		}
	}
}
