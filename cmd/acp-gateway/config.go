package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"go.yaml.in/yaml/v3"
)

// applyConfig reads the YAML config file at path and sets each flag of fs
// that the command line did not set. Keys are flag names without dashes;
// a repeatable flag takes a list, and agent takes a map of name to command
// line; agent-mcp takes a map of agent name to a list of MCP servers (each
// set as NAME=its JSON):
//
//	listen: 0.0.0.0:8080
//	store: redis://redis:6379/0
//	agent:
//	  claude: npx -y @zed-industries/claude-code-acp
//	agent-mcp:
//	  claude: [{name: fs, command: /usr/bin/mcp-fs, args: [--ro], env: []}]
//	cors-origin: [https://app.example.com]
//
// An unknown key, or a value a flag refuses, is an error naming it.
func applyConfig(fs *flag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var settings map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&settings); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("--config %s: %v", path, err)
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if key == "config" || fs.Lookup(key) == nil {
			return fmt.Errorf("--config %s: unknown setting %q", path, key)
		}
		if onCommandLine[key] {
			continue // flags win
		}
		var values []string
		switch v := settings[key].(type) {
		case []any:
			for _, e := range v {
				values = append(values, scalar(e))
			}
		case map[string]any:
			names := make([]string, 0, len(v))
			for n := range v {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if list, ok := v[n].([]any); ok {
					for _, e := range list {
						values = append(values, n+"="+scalar(e))
					}
					continue
				}
				values = append(values, n+"="+scalar(v[n]))
			}
		case nil:
			return fmt.Errorf("--config %s: %s has no value", path, key)
		default:
			values = []string{scalar(v)}
		}
		for _, v := range values {
			if err := fs.Set(key, v); err != nil {
				return fmt.Errorf("--config %s: %s: %v", path, key, err)
			}
		}
	}
	return nil
}

// scalar is a setting's value as a flag takes it: a map or a list as
// JSON.
func scalar(v any) string {
	switch v.(type) {
	case nil:
		return ""
	case map[string]any, []any:
		js, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(js)
	}
	return fmt.Sprint(v)
}
