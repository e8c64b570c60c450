package auth

// SetOnWatching makes t's Watch call f once it has registered for SIGHUP, so
// that a test knows when sending SIGHUP is safe. Call it before Watch.
func SetOnWatching(t *Tokens, f func()) { t.onWatching = f }
