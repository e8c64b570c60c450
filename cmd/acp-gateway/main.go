// Command acp-gateway puts ACP agents on the network.
//
//	acp-gateway serve [--listen HOST:PORT] [--agent NAME=COMMAND_LINE]... [--store URL]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kballard/go-shellquote"

	"github.com/acp-gateway/acp-gateway/gateway/server"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

const usage = `usage: acp-gateway serve [--listen HOST:PORT] [--agent NAME=COMMAND_LINE]... [--store URL]
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// exitUsage is the exit status for bad flags or configuration.
const exitUsage = 2

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		cfg, err := parseServe(args[1:], stderr)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			fmt.Fprintf(stderr, "acp-gateway: %v\n", err)
			return exitUsage
		}
		if err := serve(ctx, cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "acp-gateway: %v\n", err)
			return 1
		}
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "acp-gateway: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

// serveConfig is the configuration of `acp-gateway serve`.
type serveConfig struct {
	listen string
	agents map[string][]string
	store  string
}

// agentFlags collects repeated --agent NAME=COMMAND_LINE flags.
type agentFlags map[string][]string

func (a agentFlags) String() string { return "" }

func (a agentFlags) Set(v string) error {
	name, cmdline, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=COMMAND_LINE, got %q", v)
	}
	if _, dup := a[name]; dup {
		return fmt.Errorf("agent %q given twice", name)
	}
	words, err := shellquote.Split(cmdline)
	if err != nil {
		return fmt.Errorf("agent %q: command line: %v", name, err)
	}
	if len(words) == 0 {
		return fmt.Errorf("agent %q: empty command line", name)
	}
	a[name] = words
	return nil
}

func parseServe(args []string, stderr io.Writer) (*serveConfig, error) {
	cfg := &serveConfig{agents: agentFlags{}}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.listen, "listen", server.DefaultListen, "address to serve Connect, gRPC and gRPC-Web on")
	fs.Var(agentFlags(cfg.agents), "agent", "NAME=COMMAND_LINE of an agent (repeatable)")
	fs.StringVar(&cfg.store, "store", "memory:", "state store URL")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.PrintDefaults()
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve takes no arguments, got %q", fs.Args())
	}
	if _, _, err := net.SplitHostPort(cfg.listen); err != nil {
		return nil, fmt.Errorf("--listen %q: %v", cfg.listen, err)
	}
	if cfg.store != "memory:" {
		return nil, fmt.Errorf("--store %q: only memory: is supported in this version", cfg.store)
	}
	return cfg, nil
}

func serve(ctx context.Context, cfg *serveConfig, stdout io.Writer) error {
	l, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stdout, nil))
	srv := server.New(acpv2connect.UnimplementedSessionServiceHandler{})
	log.Info("serving", "addr", l.Addr().String())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	return <-done
}
