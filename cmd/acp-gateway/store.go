package main

import (
	"os"
	"path/filepath"
)

// stateDir is where the gateway keeps its state by default:
// $XDG_STATE_HOME/acp-gateway, or ~/.local/state/acp-gateway; "" when
// neither is known.
func stateDir() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "acp-gateway")
}

// defaultBoltPath is where the default store lives:
// $XDG_STATE_HOME/acp-gateway/sessions.db, or
// ~/.local/state/acp-gateway/sessions.db.
func defaultBoltPath() string {
	dir := stateDir()
	if dir == "" {
		return "acp-gateway-sessions.db"
	}
	return filepath.Join(dir, "sessions.db")
}

// defaultWorkspaceRoot is where sessions created with an empty cwd get
// their directories when --workspace-root is not given:
// $XDG_STATE_HOME/acp-gateway/workspaces, or
// ~/.local/state/acp-gateway/workspaces.
func defaultWorkspaceRoot() string {
	dir := stateDir()
	if dir == "" {
		return "acp-gateway-workspaces"
	}
	return filepath.Join(dir, "workspaces")
}
