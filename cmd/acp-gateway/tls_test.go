package main

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T) (cert, key string) {
	t.Helper()
	der, k := testutil.SelfSigned(t)
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// --tls-cert and --tls-key (or their config file keys) serve HTTPS, and
// the replica's advertised URL is https; one without the other, or files
// that are no certificate and key, are refused.
func TestTLSFlags(t *testing.T) {
	t.Parallel()
	cert, key := writeCert(t)
	cfg, err := parseServe([]string{"--store", "memory:", "--listen", "127.0.0.1:9443", "--tls-cert", cert, "--tls-key", key}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.tls == nil || len(cfg.tls.Certificates) != 1 || cfg.advertise != "https://127.0.0.1:9443" {
		t.Errorf("TLS %v, advertise %q", cfg.tls, cfg.advertise)
	}
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("tls-cert: "+cert+"\ntls-key: "+key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err := parseServe([]string{"--store", "memory:", "--config", config}, io.Discard); err != nil || cfg.tls == nil {
		t.Errorf("from the config file: %v, %v", cfg, err)
	}
	if cfg, err := parseServe([]string{"--store", "memory:", "--listen", "127.0.0.1:9080"}, io.Discard); err != nil || cfg.tls != nil || cfg.advertise != "http://127.0.0.1:9080" {
		t.Errorf("without TLS: %v, %v", cfg, err)
	}
	for _, args := range [][]string{{"--tls-cert", cert}, {"--tls-key", key}, {"--tls-cert", key, "--tls-key", cert}} {
		if _, err := parseServe(append([]string{"--store", "memory:"}, args...), io.Discard); err == nil || !strings.Contains(err.Error(), "--tls-") {
			t.Errorf("%q: %v, want refused naming the flags", args, err)
		}
	}
}
