// Package textcut cuts text to a number of bytes without splitting a
// character: what every bound on a client's or an agent's text (titles,
// log lines, paths) needs.
package textcut

import "unicode/utf8"

// Prefix returns the longest prefix of s of at most n bytes that ends on a
// character boundary: s itself when it is no longer than n.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // s[n] continues the character before it
	}
	return s[:n]
}
