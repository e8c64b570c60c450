package auth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/auth"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// loadTokens writes content to a new tokens file and loads it.
func loadTokens(t *testing.T, content string) (tokens *auth.Tokens, path string) {
	t.Helper()
	path = writeFile(t, content)
	tokens, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	return tokens, path
}

// rewrite replaces the content of the file at path.
func rewrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A token of exactly MinTokenBytes, and one given by its digest.
const (
	short16 = "0123456789abcdef"
	hashed  = "a-token-given-by-its-hash"
)

var hashedHex = func() string {
	digest := sha256.Sum256([]byte(hashed))
	return hex.EncodeToString(digest[:])
}()

func TestLoadTokens(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, content string
		users         map[string]string // token -> user
	}{
		{"good", "tok-alice-0123456789 alice\ntok-bob-0123456789 bob\ntok-alice2-0123456789 alice\n",
			map[string]string{"tok-alice-0123456789": "alice", "tok-bob-0123456789": "bob", "tok-alice2-0123456789": "alice"}},
		{"comments blanks and spacing", "# the gateway's tokens\n\n   # indented comment\n\t tok-a-0123456789 \t alice  \r\n\ntok#b-0123456789 bob\n# trailing",
			map[string]string{"tok-a-0123456789": "alice", "tok#b-0123456789": "bob"}},
		{"no final newline", "tok-a-0123456789 alice", map[string]string{"tok-a-0123456789": "alice"}},
		{"the shortest token", short16 + " alice\n", map[string]string{short16: "alice"}},
		{"a token given by its hash", "sha256:" + strings.ToUpper(hashedHex) + " alice\n", map[string]string{hashed: "alice"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tokens, _ := loadTokens(t, tt.content)
			if tokens.Len() != len(tt.users) {
				t.Errorf("Len() = %d, want %d", tokens.Len(), len(tt.users))
			}
			for token, want := range tt.users {
				got, err := tokens.Authenticate(t.Context(), bearer(token))
				if err != nil || got != want {
					t.Errorf("Authenticate(%q) = %q, %v; want %q", token, got, err, want)
				}
			}
		})
	}
}

// A bad file is refused with an error that names the file and the line,
// and does not show the token.
func TestLoadTokensRefusesBadFiles(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, content string
		wantErr       []string // substrings of the error, after the path
		secret        string   // must not appear in the error
	}{
		{"one field", "tok-a-0123456789 alice\n# c\nlonely-secret\n", []string{":3:", "TOKEN USER", "got 1 fields"}, "lonely-secret"},
		{"three fields", "\nthree-secret alice bob\n", []string{":2:", "got 3 fields"}, "three-secret"},
		{"inline comment is not a comment", "tok-a-0123456789 alice # admin\n", []string{":1:", "got 4 fields"}, "tok-a-0123456789"},
		{"duplicate token", "dup-secret-0123456789 alice\ntok-b-0123456789 bob\ndup-secret-0123456789 carol\n", []string{":3:", "duplicate token", "line 1"}, "dup-secret"},
		{"empty file", "", []string{"no tokens"}, ""},
		{"only comments", "# tok-a alice\n\n", []string{"no tokens"}, ""},
		{"a token one byte too short", "tok-a-0123456789 alice\n" + short16[1:] + " bob\n", []string{":2:", "15 bytes", "at least 16", "openssl rand"}, short16[1:]},
		{"a one-character token", "x alice\n", []string{":1:", "1 bytes", "at least 16"}, ""},
		{"a hash too short", "sha256:" + hashedHex[1:] + " alice\n", []string{":1:", "64 hex digits", "sha256sum", "got 63 characters"}, hashedHex[1:]},
		{"a hash that is not hex", "\nsha256:" + hashedHex[:63] + "g alice\n", []string{":2:", "not a hex digit"}, hashedHex[:63]},
		{"a token listed both plain and hashed", hashed + " alice\nsha256:" + hashedHex + " bob\n", []string{":2:", "duplicate token", "line 1"}, hashed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, tt.content)
			_, err := auth.LoadTokens(path)
			if err == nil {
				t.Fatalf("LoadTokens succeeded, want an error containing %q", tt.wantErr)
			}
			msg := err.Error()
			for _, want := range append([]string{path}, tt.wantErr...) {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if tt.secret != "" && strings.Contains(msg, tt.secret) {
				t.Errorf("error %q contains the token", msg)
			}
		})
	}
}

func TestLoadTokensMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "absent")
	_, err := auth.LoadTokens(path)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("LoadTokens(missing) = %v, want a not-exist error naming %s", err, path)
	}
}

func TestTokensAuthenticateFailures(t *testing.T) {
	t.Parallel()
	tokens, _ := loadTokens(t, "good-token-0123456789 alice\n")
	tests := []struct {
		name   string
		header []string // Authorization values
	}{
		{"no header", nil},
		{"unknown token", []string{"Bearer wrong-token-0123456789"}},
		{"prefix of a token", []string{"Bearer good-token-012345678"}},
		{"token with suffix", []string{"Bearer good-token-01234567892"}},
		{"basic scheme", []string{"Basic good-token-0123456789"}},
		{"no scheme", []string{"good-token-0123456789"}},
		{"empty bearer", []string{"Bearer "}},
		{"two headers", []string{"Bearer good-token-0123456789", "Bearer good-token-0123456789"}},
		{"extra field", []string{"Bearer good-token-0123456789 x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := make(map[string][]string)
			if tt.header != nil {
				h["Authorization"] = tt.header
			}
			user, err := tokens.Authenticate(t.Context(), h)
			if user != "" || !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("Authenticate = %q, %v; want ErrUnauthenticated", user, err)
			}
			if strings.Contains(err.Error(), "good-token-012345678") || strings.Contains(err.Error(), "wrong-token-0123456789") {
				t.Errorf("error %q contains the token", err)
			}
		})
	}
	// The scheme is case-insensitive.
	if user, err := tokens.Authenticate(t.Context(), map[string][]string{"Authorization": {"bearer good-token-0123456789"}}); user != "alice" {
		t.Errorf("lower-case scheme: Authenticate = %q, %v; want alice", user, err)
	}
}

func TestReloadKeepsPreviousSetOnError(t *testing.T) {
	t.Parallel()
	tokens, path := loadTokens(t, "old-token-0123456789 alice\n")
	for _, bad := range []string{"bad-line\n", "", "x-0123456789abcdef a\nx-0123456789abcdef b\n", "short-token bob\n", "sha256:abc bob\n"} {
		rewrite(t, path, bad)
		if err := tokens.Reload(); err == nil {
			t.Fatalf("Reload of %q succeeded", bad)
		}
		if user, err := tokens.Authenticate(t.Context(), bearer("old-token-0123456789")); user != "alice" {
			t.Fatalf("after failed Reload of %q: Authenticate(old) = %q, %v; want alice", bad, user, err)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := tokens.Reload(); err == nil {
		t.Fatal("Reload of a removed file succeeded")
	}
	if user, _ := tokens.Authenticate(t.Context(), bearer("old-token-0123456789")); user != "alice" {
		t.Fatal("removed file: old token no longer accepted")
	}

	rewrite(t, path, "new-token-0123456789 bob\n")
	if err := tokens.Reload(); err != nil {
		t.Fatal(err)
	}
	if user, err := tokens.Authenticate(t.Context(), bearer("new-token-0123456789")); user != "bob" {
		t.Errorf("Authenticate(new) = %q, %v; want bob", user, err)
	}
	if _, err := tokens.Authenticate(t.Context(), bearer("old-token-0123456789")); err == nil {
		t.Error("old token still accepted after a good Reload")
	}
}

// startWatch runs tokens.Watch until the test ends and returns once Watch
// has registered for SIGHUP.
func startWatch(t *testing.T, tokens *auth.Tokens, every time.Duration, log *slog.Logger) {
	t.Helper()
	ready := make(chan struct{})
	auth.SetOnWatching(tokens, func() { close(ready) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tokens.Watch(ctx, every, log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return after its context ended")
		}
	})
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not start")
	}
}

func TestWatchPicksUpChanges(t *testing.T) {
	t.Parallel()
	const original = "token-1-0123456789 alice\n"
	// Each rewrite changes only what its name says, so each of size, mtime
	// and inode is shown to be watched.
	tests := []struct {
		name    string
		content string // the new file, with token-2-0123456789 for bobby
		rewrite func(t *testing.T, path, content string, old os.FileInfo)
	}{
		{
			name:    "size",
			content: "token-2-0123456789 bobby\n# longer\n",
			rewrite: func(t *testing.T, path, content string, old os.FileInfo) {
				writeWithMtime(t, path, content, old.ModTime())
			},
		},
		{
			name:    "mtime",
			content: "token-2-0123456789 bobby\n",
			rewrite: func(t *testing.T, path, content string, old os.FileInfo) {
				writeWithMtime(t, path, content, old.ModTime().Add(time.Second))
			},
		},
		{
			name:    "inode",
			content: "token-2-0123456789 bobby\n",
			rewrite: func(t *testing.T, path, content string, old os.FileInfo) {
				tmp := path + ".new"
				writeWithMtime(t, tmp, content, old.ModTime())
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tokens, path := loadTokens(t, original)
			old, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if tt.name != "size" && len(tt.content) != len(original) {
				t.Fatalf("content must keep the size %d", len(original))
			}
			logs := &testutil.SyncBuffer{}
			startWatch(t, tokens, 5*time.Millisecond, slog.New(slog.NewTextHandler(logs, nil)))
			tt.rewrite(t, path, tt.content, old)
			testutil.WaitFor(t, "the rewritten file to be loaded", func() bool {
				user, _ := tokens.Authenticate(t.Context(), bearer("token-2-0123456789"))
				return user == "bobby"
			})
			if _, err := tokens.Authenticate(t.Context(), bearer("token-1-0123456789")); err == nil {
				t.Error("the replaced token is still accepted")
			}
			testutil.WaitFor(t, "the reload to be logged", func() bool {
				return strings.Contains(logs.String(), "auth tokens reloaded")
			})
			if strings.Contains(logs.String(), "token-") {
				t.Errorf("log contains a token:\n%s", logs)
			}
		})
	}
}

// writeWithMtime writes content to path and sets its modification time.
func writeWithMtime(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	rewrite(t, path, content)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestWatchKeepsPreviousSetOnBadFile(t *testing.T) {
	t.Parallel()
	tokens, path := loadTokens(t, "token-1-0123456789 alice\n")
	logs := &testutil.SyncBuffer{}
	startWatch(t, tokens, 5*time.Millisecond, slog.New(slog.NewTextHandler(logs, nil)))
	rewrite(t, path, "token-1-0123456789 alice\nsecret-dup-0123456789 x\nsecret-dup-0123456789 y\n")
	testutil.WaitFor(t, "the failed reload to be logged", func() bool {
		return strings.Contains(logs.String(), "level=ERROR")
	})
	if !strings.Contains(logs.String(), ":3: duplicate token") {
		t.Errorf("log does not explain the failure:\n%s", logs)
	}
	if strings.Contains(logs.String(), "secret-dup-0123456789") {
		t.Errorf("log contains a token:\n%s", logs)
	}
	if user, err := tokens.Authenticate(t.Context(), bearer("token-1-0123456789")); user != "alice" {
		t.Errorf("after a bad rewrite: Authenticate = %q, %v; want alice", user, err)
	}
}

// The file's sha256: entries hold no token: the entry's text is no token.
func TestHashedEntryIsNotItselfAToken(t *testing.T) {
	t.Parallel()
	digest := sha256.Sum256([]byte("a-token-given-by-its-hash"))
	entry := "sha256:" + hex.EncodeToString(digest[:])
	tokens, _ := loadTokens(t, entry+" alice\n")
	for _, guess := range []string{entry, hex.EncodeToString(digest[:])} {
		if user, err := tokens.Authenticate(t.Context(), bearer(guess)); err == nil {
			t.Errorf("Authenticate(%q) = %q, want an error", guess, user)
		}
	}
	if user, err := tokens.Authenticate(t.Context(), bearer("a-token-given-by-its-hash")); user != "alice" {
		t.Errorf("the token itself: %q, %v; want alice", user, err)
	}
}

// A rewrite that adds a short token is refused as a whole, with the line
// logged, and the tokens in force stay.
func TestWatchKeepsPreviousSetOnShortToken(t *testing.T) {
	t.Parallel()
	tokens, path := loadTokens(t, "token-1-0123456789 alice\n")
	logs := &testutil.SyncBuffer{}
	startWatch(t, tokens, 5*time.Millisecond, slog.New(slog.NewTextHandler(logs, nil)))
	rewrite(t, path, "token-2-0123456789 bob\nshort-secret carol\n")
	testutil.WaitFor(t, "the failed reload to be logged", func() bool {
		return strings.Contains(logs.String(), "level=ERROR")
	})
	if !strings.Contains(logs.String(), ":2: the token is 12 bytes") || strings.Contains(logs.String(), "short-secret") {
		t.Errorf("the log does not name the line, or shows the token:\n%s", logs)
	}
	if user, _ := tokens.Authenticate(t.Context(), bearer("token-1-0123456789")); user != "alice" {
		t.Error("the previous token is no longer accepted")
	}
	if user, _ := tokens.Authenticate(t.Context(), bearer("token-2-0123456789")); user != "" {
		t.Error("a token of the refused file is accepted")
	}
}

func TestWatchReloadsOnSIGHUP(t *testing.T) {
	t.Parallel()
	tokens, path := loadTokens(t, "token-1-0123456789 alice\n")
	// No polling: only SIGHUP can make Watch reload.
	startWatch(t, tokens, 0, slog.New(slog.DiscardHandler))
	rewrite(t, path, "token-2-0123456789 bob\n")
	// Watch has called signal.Notify, so SIGHUP cannot kill the test process.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "SIGHUP to reload the file", func() bool {
		user, _ := tokens.Authenticate(t.Context(), bearer("token-2-0123456789"))
		return user == "bob"
	})
}
