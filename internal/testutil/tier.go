package testutil

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// The test tiers. `go test ./...` (make test, make ci) runs every test,
// and a test whose dependency is missing fails, saying what to install.
// `go test -short ./...` (make test-short) is the fast tier for daily
// work: it needs nothing but Go, and skips the tests that need more, or
// that take seconds each, through Needs and Slow, so that the reason of
// every skip reads the same.

// Needs skips the test in short mode, naming what it needs beyond Go:
// "redis", "bwrap", "chromium", "node", "promtool", "cgroups" and the
// like. In full mode it does nothing: the test runs, and fails where the
// dependency is missing.
func Needs(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped by -short (make test runs it)", what)
	}
}

// Slow skips the test in short mode: it takes seconds (an end-to-end
// run of the binary, a fault test, a fuzz target's large seeds). In full
// mode it does nothing.
func Slow(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow: skipped by -short (make test runs it)")
	}
}

// SlowPackage, called first in a TestMain, ends the test binary in short
// mode, passing, before any test runs: every test of the package is slow
// or needs more than Go (what says which), as the end-to-end tests are.
// In full mode it does nothing.
func SlowPackage(what string) {
	flag.Parse()
	if testing.Short() {
		fmt.Printf("skipped by -short (make test runs them): %s\n", what)
		os.Exit(0)
	}
}
