package auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Tokens authenticates static bearer tokens read from a file, the
// `--auth-tokens FILE` format: each line that is neither blank nor a comment
// (first non-blank character '#') is `TOKEN USER`, exactly two fields
// separated by spaces or tabs. A user may have several tokens; a token may
// appear only once. A TOKEN of at least [MinTokenBytes] bytes is the token
// itself; `sha256:HEX` is the token given by the 64 hex digits of its
// SHA-256 (`printf %s "$TOKEN" | sha256sum`), so that the file need not
// hold the secret. A token cannot itself start with `sha256:`.
//
// Tokens are held only as SHA-256 digests and a presented token is looked
// up by its digest. That is constant-time enough: the lookup's timing
// depends on the digest of the guess, never on how many of its bytes match
// a real token, so what timing could reveal is how a guess's digest
// compares with a real token's digest, and knowing part of a token's
// SHA-256 does not help make a token that has it (SHA-256 resists
// preimages).
// Tokens is safe for concurrent use.
type Tokens struct {
	path string
	set  atomic.Pointer[map[[sha256.Size]byte]string]

	// mu serialises Reload and guards seen.
	mu sync.Mutex
	// seen identifies the file version Reload last read (or failed to).
	seen fileVersion

	// onWatching, when set (by tests), is called once Watch has registered
	// for SIGHUP.
	onWatching func()
}

// fileVersion is what Watch compares to notice that the file changed.
type fileVersion struct {
	exists bool
	size   int64
	mtime  int64 // nanoseconds since the Unix epoch
	dev    uint64
	ino    uint64
}

func versionOf(fi fs.FileInfo) fileVersion {
	v := fileVersion{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		v.dev, v.ino = uint64(st.Dev), uint64(st.Ino)
	}
	return v
}

// MinTokenBytes is the length of the shortest token a tokens file may hold:
// 16 bytes, such as 16 random characters; `openssl rand -hex 32` makes a
// better one. A shorter token is an error, since a guess could find it.
const MinTokenBytes = 16

// hashedPrefix starts a tokens file entry given as the token's SHA-256.
const hashedPrefix = "sha256:"

// LoadTokens reads the tokens file at path. A malformed line, a token
// shorter than MinTokenBytes, a malformed sha256: entry, a token that
// appears twice or a file with no tokens is an error naming the file and the
// line; errors never contain a token.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Len returns the number of tokens in force.
func (t *Tokens) Len() int {
	if m := t.set.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// Reload re-reads the file. On error the previous set of tokens stays in
// force.
func (t *Tokens) Reload() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.Open(t.path)
	if err != nil {
		t.seen = fileVersion{}
		return fmt.Errorf("auth tokens: %w", err)
	}
	defer f.Close()
	// The version is taken from the open file before reading it, so a change
	// made while reading is noticed by the next poll.
	fi, err := f.Stat()
	if err != nil {
		t.seen = fileVersion{}
		return fmt.Errorf("auth tokens: %w", err)
	}
	t.seen = versionOf(fi)
	set, err := parseTokens(t.path, f)
	if err != nil {
		return err
	}
	t.set.Store(&set)
	return nil
}

// parseTokens parses the tokens file format from r; name is used in errors.
func parseTokens(name string, r io.Reader) (map[[sha256.Size]byte]string, error) {
	set := make(map[[sha256.Size]byte]string)
	firstLine := make(map[[sha256.Size]byte]int)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		fields := strings.Fields(string(line))
		if len(fields) != 2 {
			return nil, fmt.Errorf("auth tokens file %s:%d: want `TOKEN USER`, got %d fields", name, n, len(fields))
		}
		digest, err := tokenDigest(fields[0])
		if err != nil {
			return nil, fmt.Errorf("auth tokens file %s:%d: %w", name, n, err)
		}
		if prev, dup := firstLine[digest]; dup {
			return nil, fmt.Errorf("auth tokens file %s:%d: duplicate token (first on line %d)", name, n, prev)
		}
		firstLine[digest] = n
		set[digest] = fields[1]
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = errors.New("line too long")
		}
		return nil, fmt.Errorf("auth tokens file %s: %w", name, err)
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("auth tokens file %s: no tokens", name)
	}
	return set, nil
}

// tokenDigest returns the SHA-256 a tokens file's TOKEN field stands for:
// that of the token, or the one a sha256: entry gives. Its errors never
// contain the field.
func tokenDigest(field string) ([sha256.Size]byte, error) {
	var digest [sha256.Size]byte
	if h, ok := strings.CutPrefix(field, hashedPrefix); ok {
		if len(h) != hex.EncodedLen(sha256.Size) {
			return digest, fmt.Errorf("a %s entry needs the 64 hex digits of the token's SHA-256 (printf %%s \"$TOKEN\" | sha256sum), got %d characters", hashedPrefix, len(h))
		}
		if _, err := hex.Decode(digest[:], []byte(h)); err != nil {
			return digest, fmt.Errorf("a %s entry needs the 64 hex digits of the token's SHA-256, got a character that is not a hex digit", hashedPrefix)
		}
		return digest, nil
	}
	if len(field) < MinTokenBytes {
		return digest, fmt.Errorf("the token is %d bytes; a token needs at least %d (make one with `openssl rand -hex 32`)", len(field), MinTokenBytes)
	}
	return sha256.Sum256([]byte(field)), nil
}

// Authenticate implements Authenticator for `Authorization: Bearer TOKEN`.
func (t *Tokens) Authenticate(_ context.Context, h http.Header) (string, error) {
	token, ok := BearerToken(h)
	if !ok {
		return "", errNoToken
	}
	if m := t.set.Load(); m != nil {
		if user, ok := (*m)[sha256.Sum256([]byte(token))]; ok {
			return user, nil
		}
	}
	return "", &authError{msg: "unknown bearer token", other: isJWT(token)}
}

// Watch reloads the file whenever its size, modification time or inode
// changes (checked every `every`; every <= 0 disables polling) and whenever
// the process receives SIGHUP. It logs each reload's success or failure to log
// (nil means slog.Default()); a failed reload keeps the previous tokens.
// Watch returns when ctx ends.
func (t *Tokens) Watch(ctx context.Context, every time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if t.onWatching != nil {
		t.onWatching()
	}

	var tick <-chan time.Time
	if every > 0 {
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		tick = ticker.C
	}
	reload := func(why string) {
		if err := t.Reload(); err != nil {
			log.Error("auth tokens not reloaded; previous tokens stay in force", "file", t.path, "trigger", why, "err", err)
			return
		}
		log.Info("auth tokens reloaded", "file", t.path, "trigger", why, "tokens", t.Len())
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload("SIGHUP")
		case <-tick:
			if t.changed() {
				reload("file changed")
			}
		}
	}
}

// changed reports whether the file differs from the version Reload last saw.
// A file that stays missing is reported once.
func (t *Tokens) changed() bool {
	var now fileVersion
	if fi, err := os.Stat(t.path); err == nil {
		now = versionOf(fi)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return now != t.seen
}
