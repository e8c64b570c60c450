package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/acp-gateway/acp-gateway/gateway/workspace"
)

// authConfigured reports whether serve authenticates calls, so that it
// has many users to keep apart.
func (cfg *serveConfig) authConfigured() bool {
	return cfg.authTokens != "" || cfg.oidc.Issuer != ""
}

// checkWorkspace refuses a gateway with many users whose agents could run
// anywhere unless that was asked for with --any-cwd.
func (cfg *serveConfig) checkWorkspace() error {
	if cfg.authConfigured() && cfg.workspaceRoot == "" && !cfg.anyCwd {
		return errors.New("with --auth-tokens or --oidc-issuer, use --workspace-root DIR (each user's sessions under DIR/USER), " +
			"or --any-cwd to let every user's agent run in any directory of the host")
	}
	return nil
}

// setupWorkspaces returns the workspace root of serve and whether clients' cwd
// are confined to it.
//
// With --workspace-root DIR, each user's directory is DIR/USER (see
// workspace.Name), or without authentication, for the one local user, DIR
// itself; a client's cwd must lie in it unless --any-cwd is given. Without
// --workspace-root, cwd are not confined (authentication then needs
// --any-cwd, see checkWorkspace), and sessions created with an empty cwd
// get their directories under defaultWorkspaceRoot; when that cannot be
// made, serve logs why and refuses empty cwds.
func (cfg *serveConfig) setupWorkspaces(log *slog.Logger) (root *workspace.Root, confined bool, err error) {
	if cfg.anyCwd {
		log.Warn("--any-cwd: clients' cwd are not confined to their workspace; every user's agent may run in any directory of this host")
	}
	newRoot := workspace.NewLocal
	if cfg.authConfigured() {
		newRoot = workspace.New
	}
	if cfg.workspaceRoot != "" {
		root, err := newRoot(cfg.workspaceRoot)
		if err != nil {
			return nil, false, configError{fmt.Errorf("--workspace-root: %w", err)}
		}
		return root, !cfg.anyCwd, nil
	}
	dir := defaultWorkspaceRoot()
	root, err = newRoot(dir)
	if err != nil {
		log.Warn("no directory for the workspaces of sessions created without a cwd: they are refused; give --workspace-root DIR",
			"dir", dir, "error", err)
		return nil, false, nil
	}
	return root, false, nil
}

// workspaceDir is the workspace root serve set up, for its start-up log
// line ("" for none).
func (cfg *serveConfig) workspaceDir() string {
	if cfg.workspaces == nil {
		return ""
	}
	return cfg.workspaces.Dir()
}
