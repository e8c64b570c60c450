package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTSClientFromTheRepositoryFolder installs clients/ts as a new user
// would before it is published: from a fresh copy of the repository's
// folder (no node_modules, no dist) into a new npm project, as a folder
// dependency (npm install --install-links DIR). Its prepare script builds
// dist/; the project's client, connect-node over the package, then runs a
// whole demo turn.
func TestTSClientFromTheRepositoryFolder(t *testing.T) {
	t.Parallel()
	node := tool(t, nodeBinary)
	if _, err := nodeModules(); err != nil { // the npm set-up, and its hint
		t.Fatal(err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is not on PATH: %v", err)
	}
	g := startGateway(t, "--store", "memory:", "--permission-timeout", "30s")

	// A fresh copy, as a clone has it.
	pkg := filepath.Join(t.TempDir(), "ts")
	if err := copyTree(filepath.Join("..", "clients", "ts"), pkg, "node_modules", "dist"); err != nil {
		t.Fatal(err)
	}
	// The versions the other Node tests use.
	var deps struct{ Dependencies map[string]string }
	raw, err := os.ReadFile(filepath.Join(nodeDir, "package.json"))
	if err == nil {
		err = json.Unmarshal(raw, &deps)
	}
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"install", "--install-links", "--no-audit", "--no-fund", "--prefer-offline", pkg}
	for _, name := range []string{"@bufbuild/protobuf", "@connectrpc/connect", "@connectrpc/connect-node"} {
		args = append(args, name+"@"+deps.Dependencies[name])
	}
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name":"app","private":true,"type":"module"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, args...)
	install.Dir = project
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, f := range []string{"index.js", "index.d.ts"} {
		if _, err := os.Stat(filepath.Join(project, "node_modules", "@acp-gateway", "client", "dist", f)); err != nil {
			t.Fatalf("the installed package has no dist/%s: %v", f, err)
		}
	}
	script := filepath.Join(project, "client.mjs")
	if err := copyFile(clientScript, script); err != nil {
		t.Fatal(err)
	}
	id, events := nodeTurn(t, node, script, "@acp-gateway/client", g, "connect")
	checkDemoTurn(t, g, id, events)
}

// copyTree copies the directory from to to, leaving out the entries whose
// names skip lists.
func copyTree(from, to string, skip ...string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		for _, s := range skip {
			if d.Name() == s && path != from {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", path)
		}
		return copyFile(path, filepath.Join(to, rel))
	})
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	fi, err := os.Stat(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, fi.Mode().Perm())
}
