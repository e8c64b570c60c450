package server

import (
	"sync"
	"time"

	"github.com/acp-gateway/acp-gateway/internal/textcut"
)

// refusalLogEvery spaces the log lines of refusals (of connections past
// the limit, of requests for their Host or Origin): anyone can make the
// gateway refuse as often as it likes, and is not to fill its log.
const refusalLogEvery = 10 * time.Second

// refusalLog lets a refusal be logged once every refusalLogEvery, and
// counts the refusals in between, for the next line to tell. Its zero
// value is ready.
type refusalLog struct {
	mu     sync.Mutex
	logged time.Time // when the last line was logged
	held   int       // refusals not logged since
}

// allow reports whether a refusal at now is to be logged and, when it is,
// how many it stands for: itself and those held back before it.
func (l *refusalLog) allow(now time.Time) (ok bool, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held++
	if !l.logged.IsZero() && now.Sub(l.logged) < refusalLogEvery {
		return false, 0
	}
	refused, l.held, l.logged = l.held, 0, now
	return true, refused
}

// maxLoggedBytes bounds a value a client chose (a header, a path) that is
// logged or told back to it: headers may take up to a megabyte.
const maxLoggedBytes = 256

// clip is s cut to maxLoggedBytes, at a character's start, with "…" to
// tell it was cut.
func clip(s string) string {
	if len(s) <= maxLoggedBytes {
		return s
	}
	return textcut.Prefix(s, maxLoggedBytes) + "…"
}
