package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's layout table matches the tree: every row names a directory
// that exists, every top-level directory has a row (or rows below it), and
// every package directory under gateway/, internal/ and cmd/ has its own.
func TestReadmeLayoutMatchesTheTree(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatal("the README has no Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(layout, -1) {
		rows[strings.TrimSuffix(m[1], "/")] = true
	}
	for row := range rows {
		if _, err := os.Stat(filepath.Join(root, row)); err != nil {
			t.Errorf("the layout table names %s: %v", row, err)
		}
	}
	under := func(dir string) bool {
		for row := range rows {
			if row == dir || strings.HasPrefix(row, dir+"/") {
				return true
			}
		}
		return false
	}
	top, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range top {
		if e.IsDir() && e.Name() != ".git" && e.Name() != "node_modules" && !under(e.Name()) {
			t.Errorf("the layout table has no row for %s/", e.Name())
		}
	}
	for _, parent := range []string{"gateway", "internal", "cmd"} {
		dirs, err := os.ReadDir(filepath.Join(root, parent))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range dirs {
			if d := parent + "/" + e.Name(); e.IsDir() && !rows[d] {
				t.Errorf("the layout table has no row for %s/", d)
			}
		}
	}
}
