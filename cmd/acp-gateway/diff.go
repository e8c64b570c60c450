package main

import (
	"fmt"
	"io"
	"strings"
)

// diffContext is how many unchanged lines a hunk shows around a change.
const diffContext = 3

// maxDiffCells bounds the table the line diff fills (lines of the old text
// times lines of the new); past it the whole text is shown replaced.
const maxDiffCells = 4 << 20

// writeUnifiedDiff writes the change from oldText (nil: a new file) to
// newText as a unified diff of path, in hunks with diffContext lines of
// context.
func writeUnifiedDiff(w io.Writer, path string, oldText *string, newText string) {
	from := "a" + path
	var a []string
	if oldText == nil {
		from = "/dev/null"
	} else {
		a = splitLines(*oldText)
	}
	b := splitLines(newText)
	fmt.Fprintf(w, "--- %s\n+++ b%s\n", from, path)
	ops := diffLines(a, b)
	for start := 0; start < len(ops); {
		// The next change, and its hunk: context before, the changes
		// and what lies between them (up to twice the context), context
		// after.
		first := start
		for first < len(ops) && ops[first].kind == ' ' {
			first++
		}
		if first == len(ops) {
			break
		}
		lo := max(first-diffContext, start)
		hi := first
		for i := first; i < len(ops); i++ {
			if ops[i].kind != ' ' {
				hi = i + 1
			} else if i-hi >= 2*diffContext {
				break
			}
		}
		hi = min(hi+diffContext, len(ops))
		aStart, bStart, aLen, bLen := ops[lo].a, ops[lo].b, 0, 0
		for _, op := range ops[lo:hi] {
			if op.kind != '+' {
				aLen++
			}
			if op.kind != '-' {
				bLen++
			}
		}
		fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		for _, op := range ops[lo:hi] {
			fmt.Fprintf(w, "%c%s\n", op.kind, op.line)
		}
		start = hi
	}
}

// hunkRange is a hunk's start,length with lines numbered from 1 (the line
// before, for an empty range).
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// diffOp is a line of the diff: kept (' '), removed ('-') or added ('+'),
// with the index it had in the old text (a) and in the new (b).
type diffOp struct {
	kind byte
	line string
	a, b int
}

// diffLines returns the edit script from a to b that keeps a longest
// common subsequence of lines.
func diffLines(a, b []string) []diffOp {
	if len(a)*len(b) > maxDiffCells {
		ops := make([]diffOp, 0, len(a)+len(b))
		for i, l := range a {
			ops = append(ops, diffOp{'-', l, i, 0})
		}
		for j, l := range b {
			ops = append(ops, diffOp{'+', l, len(a), j})
		}
		return ops
	}
	// lcs[i][j] is the length of a longest common subsequence of a[i:]
	// and b[j:].
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i], i, j})
			i++
			j++
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, diffOp{'-', a[i], i, j})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j], i, j})
			j++
		}
	}
	return ops
}
