package deploy_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deploy/ is a Go module of its own, so that the libraries its tests
// check the files with (BuildKit, kustomize, the Kubernetes API types,
// Prometheus) stay out of the gateway's module: its go.mod requires only
// what its packages and tools need.
func TestProductModuleRequiresNoDeployLibraries(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Path}}", "all")
	cmd.Dir = repo()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	mods := strings.Fields(string(out))
	if !slices.Contains(mods, "github.com/acp-gateway/acp-gateway") || !slices.Contains(mods, "connectrpc.com/connect") {
		t.Fatalf("go list -m all in the repository root listed %d modules, not the gateway's: %q", len(mods), mods)
	}
	for _, m := range []string{
		"github.com/moby/buildkit", "github.com/moby/patternmatcher", "github.com/prometheus/prometheus",
		"k8s.io/api", "k8s.io/apimachinery", "sigs.k8s.io/kustomize/api", "sigs.k8s.io/kustomize/kyaml",
	} {
		if slices.Contains(mods, m) {
			t.Errorf("the gateway's module graph holds %s, which only deploy's tests use", m)
		}
	}
}
