package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestUnifiedDiff(t *testing.T) {
	t.Parallel()
	var lines []string
	for i := 1; i <= 20; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	old := strings.Join(lines, "\n") + "\n"
	lines[1] = "changed 2"
	lines[16] = "changed 17"
	lines = append(lines[:10], lines[11:]...) // line 11 removed
	changed := strings.Join(lines, "\n") + "\n"
	empty := ""
	for _, tt := range []struct {
		name string
		old  *string
		new  string
		want string
	}{
		{"two hunks", &old, changed, `--- a/p.txt
+++ b/p.txt
@@ -1,5 +1,5 @@
 line 1
-line 2
+changed 2
 line 3
 line 4
 line 5
@@ -8,13 +8,12 @@
 line 8
 line 9
 line 10
-line 11
 line 12
 line 13
 line 14
 line 15
 line 16
-line 17
+changed 17
 line 18
 line 19
 line 20
`},
		{"new file", nil, "a\nb\n", "--- /dev/null\n+++ b/p.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n"},
		{"emptied", &empty, "", "--- a/p.txt\n+++ b/p.txt\n"},
		{"unchanged", &old, old, "--- a/p.txt\n+++ b/p.txt\n"},
	} {
		var b bytes.Buffer
		writeUnifiedDiff(&b, "/p.txt", tt.old, tt.new)
		if b.String() != tt.want {
			t.Errorf("%s: got\n%s\nwant\n%s", tt.name, b.String(), tt.want)
		}
	}
}
