package main

import (
	"os"
	"path/filepath"
)

// defaultBoltPath is where the default store lives:
// $XDG_STATE_HOME/acp-gateway/sessions.db, or
// ~/.local/state/acp-gateway/sessions.db.
func defaultBoltPath() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "acp-gateway-sessions.db"
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "acp-gateway", "sessions.db")
}
