package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"

	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	"github.com/acp-gateway/acp-gateway/internal/buildinfo"
)

// stdin is what `acp-gateway connect` reads the editor's requests from.
var stdin io.Reader = os.Stdin

// connectConfig is the configuration of `acp-gateway connect`.
type connectConfig struct {
	url          string
	agent        string
	token        string
	cwd          string
	keepSessions bool
	logLevel     slog.Level
}

// connectCmd runs `acp-gateway connect URL --agent NAME`: an ACP agent on
// stdin and stdout for an editor, whose sessions run on the gateway at URL.
func connectCmd(ctx context.Context, args []string, in io.Reader, stdout, stderr io.Writer) int {
	cfg, err := parseConnect(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "acp-gateway connect: %v\n", err)
		return exitUsage
	}
	// stdout is the protocol: diagnostics go to stderr, which editors log.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel})).With("component", "acp-gateway connect")
	version := buildinfo.Get().Version
	log.Info("bridging", "gateway", cfg.url, "agent", cfg.agent, "token", cfg.token != "")
	if warning := tokenInClear(cfg.url, cfg.token); warning != "" {
		log.Warn(warning)
	}
	err = bridge.Serve(ctx, in, stdout, bridge.Options{
		Client:       bridge.NewClient(&http.Client{}, cfg.url, cfg.token),
		Agent:        cfg.agent,
		Cwd:          cfg.cwd,
		KeepSessions: cfg.keepSessions,
		CheckGateway: true,
		Version:      version,
		Log:          log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "acp-gateway connect: %v\n", err)
		return 1
	}
	return 0
}

func parseConnect(args []string, stderr io.Writer) (*connectConfig, error) {
	cfg := &connectConfig{}
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.agent, "agent", "", "name of the gateway agent that new sessions run (required)")
	tokens := addTokenFlags(fs)
	fs.StringVar(&cfg.cwd, "cwd", "", "working directory of new sessions on the gateway's machine (default: the editor's)")
	fs.BoolVar(&cfg.keepSessions, "keep-sessions", false, "leave the sessions open when the editor goes, for a later session/load")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "debug, info, warn or error (logs go to stderr)")
	// Flags may come before or after the URL.
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stderr, "usage: acp-gateway connect URL --agent NAME [--token TOKEN | --token-file FILE] [--cwd DIR] [flags]\n\n"+
					"Speaks ACP on stdin and stdout, as an agent an editor spawns, and runs the sessions on the gateway at URL.\n\n")
				fs.SetOutput(stderr)
				fs.PrintDefaults()
			}
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 1 {
		return nil, fmt.Errorf("want one gateway URL, got %d arguments %q", len(positional), positional)
	}
	u, err := url.Parse(positional[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("the gateway URL must be http://HOST[:PORT] or https://HOST[:PORT], got %q", positional[0])
	}
	cfg.url = positional[0]
	if cfg.agent == "" {
		return nil, errors.New("--agent NAME is required")
	}
	if cfg.token, err = tokens.resolve(); err != nil {
		return nil, err
	}
	if err := checkCwd(cfg.cwd); err != nil {
		return nil, err
	}
	return cfg, nil
}

// isLoopback reports whether host names this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
