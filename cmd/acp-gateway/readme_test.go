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
	// Directories git ignores at the top (/dist/, what make release
	// builds) are no part of the tree.
	ignored := map[string]bool{".git": true, "node_modules": true}
	if gi, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, m := range regexp.MustCompile(`(?m)^/([^/*\s]+)/$`).FindAllStringSubmatch(string(gi), -1) {
			ignored[m[1]] = true
		}
	}
	for _, e := range top {
		if e.IsDir() && !ignored[e.Name()] && !under(e.Name()) {
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

// Every relative link of the repository's Markdown files names a file or
// directory of the repository: none leads outside it, none is broken.
func TestMarkdownLinksStayInTheRepository(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if regexp.MustCompile(`^([a-z]+:|#)`).MatchString(target) {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			p := filepath.Join(filepath.Dir(path), target)
			rel, _ := filepath.Rel(root, path)
			if r, err := filepath.Rel(root, p); err != nil || strings.HasPrefix(r, "..") {
				t.Errorf("%s links %s, outside the repository", rel, m[1])
			} else if _, err := os.Stat(p); err != nil {
				t.Errorf("%s links %s: %v", rel, m[1], err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
