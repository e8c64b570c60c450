package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// resolveAgents checks, at start, that every agent's command can run, and
// makes its command lines independent of the sessions' working
// directories, where agents run: the program is found in PATH (a bare
// name) or at its path, a relative path resolved against wd, the
// gateway's working directory; and an argument that names an existing
// path relative to wd (see namesPath: node_modules/x/agent.js, ./lib,
// agent.js; not one that starts with "-") is made absolute too, as it
// would otherwise be looked for in each session's directory. Each
// argument so rewritten is logged. The first agent, by name, whose program
// cannot be found or run is the error, which names it.
func resolveAgents(agents agentFlags, wd string, log *slog.Logger) error {
	names := make([]string, 0, len(agents))
	for name := range agents {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		cmd := agents[name]
		program, err := resolveProgram(cmd[0], wd)
		if err != nil {
			return fmt.Errorf("--agent %s: %w", name, err)
		}
		resolved := append([]string{program}, cmd[1:]...)
		for i, arg := range resolved[1:] {
			if arg == "" || strings.HasPrefix(arg, "-") || filepath.IsAbs(arg) {
				continue
			}
			if p := filepath.Join(wd, arg); namesPath(arg, p) {
				resolved[i+1] = p
			}
		}
		for i := range resolved {
			if resolved[i] != cmd[i] {
				log.Info("agent command: a relative path made absolute against the gateway's working directory", "agent", name, "given", cmd[i], "path", resolved[i])
			}
		}
		agents[name] = resolved
	}
	return nil
}

// resolveProgram returns the absolute path of an agent's program: a name
// without a slash is looked up in PATH, a path is taken relative to wd.
func resolveProgram(program, wd string) (string, error) {
	if !strings.Contains(program, "/") {
		path, err := exec.LookPath(program)
		if errors.Is(err, exec.ErrDot) {
			err = nil // found through a relative PATH entry: made absolute below
		}
		if err != nil {
			return "", fmt.Errorf("%q is not a command found in PATH (%s)", program, os.Getenv("PATH"))
		}
		program = path
	}
	if !filepath.IsAbs(program) {
		program = filepath.Join(wd, program)
	}
	fi, err := os.Stat(program)
	switch {
	case err != nil:
		return "", fmt.Errorf("program %s: %w", program, err)
	case fi.IsDir():
		return "", fmt.Errorf("program %s is a directory", program)
	case fi.Mode()&0o111 == 0:
		return "", fmt.Errorf("program %s is not executable", program)
	}
	return program, nil
}

// namesPath reports whether an agent's argument arg, which is p taken
// from the gateway's working directory, names a path there: one with a
// slash that exists (node_modules/x/agent.js, ./lib), or a bare name
// with a dot of a regular file (agent.js, config.toml). A bare name
// without one (serve, or a Python module as in -m mypkg) is left alone,
// even when something there has that name.
func namesPath(arg, p string) bool {
	fi, err := os.Stat(p)
	if err != nil {
		return false
	}
	return strings.Contains(arg, "/") || strings.Contains(arg, ".") && fi.Mode().IsRegular()
}
