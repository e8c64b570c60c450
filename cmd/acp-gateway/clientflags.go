package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// tokenEnv names the variable the gateway token is taken from when no flag
// gives one.
const tokenEnv = "ACP_GATEWAY_TOKEN"

// tokenFlags are the gateway token flags of the commands that call a
// gateway (connect, try).
type tokenFlags struct{ token, file *string }

func addTokenFlags(fs *flag.FlagSet) tokenFlags {
	return tokenFlags{
		token: fs.String("token", "", "bearer token for the gateway (default $"+tokenEnv+")"),
		file:  fs.String("token-file", "", "file holding the bearer token for the gateway"),
	}
}

// resolve returns the token: --token's, --token-file's contents, or
// $ACP_GATEWAY_TOKEN's; "" for none. It fails for both flags at once, an
// unreadable or empty file, or a token with spaces.
func (f tokenFlags) resolve() (string, error) {
	token := *f.token
	if token != "" && *f.file != "" {
		return "", errors.New("give at most one of --token and --token-file")
	}
	if *f.file != "" {
		b, err := os.ReadFile(*f.file)
		if err != nil {
			return "", fmt.Errorf("--token-file: %v", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return "", fmt.Errorf("--token-file: %s holds no token", *f.file)
		}
	}
	if token == "" {
		token = strings.TrimSpace(os.Getenv(tokenEnv))
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return "", errors.New("the token must be one word without spaces")
	}
	return token, nil
}

// checkCwd refuses a --cwd that is not an absolute path: it names a
// directory on the gateway's machine, which a relative one cannot.
func checkCwd(cwd string) error {
	if cwd != "" && !filepath.IsAbs(cwd) {
		return fmt.Errorf("--cwd must be an absolute path, got %q", cwd)
	}
	return nil
}

// tokenInClear is the warning for a token sent to rawURL over plain http
// to another host, or "" when there is no token or no such risk.
func tokenInClear(rawURL, token string) string {
	if u, err := url.Parse(rawURL); err == nil && token != "" && u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return "the token travels unencrypted over http to a host that is not this one; use https"
	}
	return ""
}
