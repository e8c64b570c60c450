package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	units "github.com/docker/go-units"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/egress"
	"github.com/acp-gateway/acp-gateway/gateway/limits"
	"github.com/acp-gateway/acp-gateway/gateway/sandbox"
	"github.com/acp-gateway/acp-gateway/gateway/workspace"
)

// confineConfig is how serve confines agents: the sandbox and the limits
// on each agent's process tree.
type confineConfig struct {
	// sandbox is the --sandbox mode; empty until parseServe picks the
	// default (bwrap with authentication, none without).
	sandbox    string
	readOnly   listFlag
	readWrite  listFlag
	homes      string
	network    string
	egress     listFlag
	limits     limits.Limits
	memory     sizeFlag
	fileSize   sizeFlag
	configPath string
	// nice is --agent-nice: how much lower than the gateway's the agents'
	// CPU priority is.
	nice int
	// supported reports whether this platform can sandbox agents
	// (sandbox.Supported, but in tests).
	supported func() error
}

// sizeFlag is a size in bytes, given as 4GiB, 512MiB, 4g or a plain number.
type sizeFlag struct{ n *int64 }

func (f sizeFlag) String() string {
	if f.n == nil || *f.n == 0 {
		return "0"
	}
	return units.BytesSize(float64(*f.n))
}

func (f sizeFlag) Set(v string) error {
	n, err := units.RAMInBytes(v)
	if err != nil || n < 0 {
		return fmt.Errorf("want a size such as 4GiB, 512MiB or 0, got %q", v)
	}
	*f.n = n
	return nil
}

// addConfineFlags registers the sandbox and limit flags of serve.
func (c *confineConfig) addConfineFlags(fs *flag.FlagSet) {
	c.limits = limits.Defaults
	c.supported = sandbox.Supported
	fs.StringVar(&c.sandbox, "sandbox", "", "how agents are confined: bwrap (each in a bubblewrap sandbox) or none (as the gateway's own user); default bwrap with --auth-tokens or --oidc-issuer, none without")
	fs.Var(&c.readOnly, "sandbox-ro", "a host path every sandboxed agent may read, at the same path, such as its install directory or a shared cache (repeatable)")
	fs.Var(&c.readWrite, "sandbox-rw", "a host path every sandboxed agent may write, at the same path; shared by all users' agents (repeatable)")
	fs.StringVar(&c.homes, "sandbox-homes", filepath.Join(filepath.Dir(defaultBoltPath()), "homes"), "with --sandbox bwrap: the directory of each user's agent HOME (DIR/USER, made 0700), where a user's agent logins persist for that user only")
	fs.StringVar(&c.network, "sandbox-network", "proxy", "with --sandbox bwrap: proxy (each agent has a network of its own whose only way out is the gateway's egress proxy: the internet, and no loopback, private or link-local address but those --agent-egress lists) or host (the host's network, unfiltered)")
	fs.Var(&c.egress, "agent-egress", "HOST:PORT a sandboxed agent may reach although it is loopback, private or link-local, such as a model API on this host (repeatable)")
	c.memory = sizeFlag{&c.limits.Memory}
	fs.Var(c.memory, "agent-memory", "most memory each agent's process tree may use; past it the agent is killed and its session says oom (0: no limit)")
	fs.Int64Var(&c.limits.Pids, "agent-pids", limits.Defaults.Pids, "most processes and threads each agent's process tree may have (0: no limit)")
	fs.Float64Var(&c.limits.CPU, "agent-cpu", limits.Defaults.CPU, "most CPUs' worth of time each agent's process tree may use (0: no limit)")
	fs.Uint64Var(&c.limits.NoFile, "agent-open-files", limits.Defaults.NoFile, "most files each agent process may hold open (0: the gateway's own limit)")
	c.fileSize = sizeFlag{new(int64)}
	*c.fileSize.n = int64(limits.Defaults.FileSize)
	fs.Var(c.fileSize, "agent-file-size", "largest file an agent process may write (0: no limit)")
	fs.IntVar(&c.nice, "agent-nice", agent.DefaultNice, "how much lower than the gateway's the CPU priority of each agent's process tree is: added to the gateway's nice value (up to 19, the lowest), so that busy agents leave the gateway, which relays every session, a CPU first (0..19; 0: the gateway's own priority)")
}

// checkConfine checks the flags once parsed; auth says whether
// authentication is configured, which makes bwrap the default.
func (c *confineConfig) checkConfine(auth bool) error {
	c.limits.FileSize = uint64(*c.fileSize.n)
	switch c.sandbox {
	case "":
		c.sandbox = sandbox.ModeNone
		if auth {
			c.sandbox = sandbox.ModeBwrap
			// Off Linux the secure default cannot be had: say so, rather
			// than run every user's agent unconfined.
			if err := c.supported(); err != nil {
				return fmt.Errorf("--sandbox bwrap, the default with --auth-tokens or --oidc-issuer: %w: pass --sandbox none to run every user's agent unconfined, as the gateway's own user", err)
			}
		}
	case sandbox.ModeBwrap:
		if err := c.supported(); err != nil {
			return fmt.Errorf("--sandbox bwrap: %w: pass --sandbox none to run agents unconfined, as the gateway's own user", err)
		}
	case sandbox.ModeNone:
	default:
		return fmt.Errorf("--sandbox %q: want bwrap or none", c.sandbox)
	}
	if c.sandbox == sandbox.ModeNone && (len(c.readOnly) > 0 || len(c.readWrite) > 0 || len(c.egress) > 0) {
		return errors.New("--sandbox-ro, --sandbox-rw and --agent-egress need --sandbox bwrap")
	}
	switch c.network {
	case "proxy":
		if _, err := egress.NewPolicy(c.egress); err != nil {
			return err
		}
	case "host":
		if len(c.egress) > 0 {
			return errors.New("--agent-egress needs --sandbox-network proxy")
		}
	default:
		return fmt.Errorf("--sandbox-network %q: want proxy or host", c.network)
	}
	if c.nice < 0 || c.nice > agent.MaxNice {
		return fmt.Errorf("--agent-nice %d: want 0 to %d", c.nice, agent.MaxNice)
	}
	if c.limits.Pids < 0 || c.limits.CPU < 0 {
		return errors.New("--agent-pids and --agent-cpu must not be negative")
	}
	for _, p := range append(append([]string{}, c.readOnly...), c.readWrite...) {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("--sandbox-ro and --sandbox-rw take absolute paths, got %q", p)
		}
	}
	return nil
}

// confinement is what serve confines agents with.
type confinement struct {
	sandbox *sandbox.Sandbox
	homes   *workspace.Root
	limits  *limits.Controller
	// egress is the sandboxed agents' egress policy, and helper the
	// executable that opens its proxy's socket in a sandbox.
	egress *egress.Policy
	helper string
}

// setupConfinement checks that the sandbox and the limits work on this
// host. With authentication (a multi-user gateway) both must; without,
// limits that cannot be enforced are logged and left off. hide lists the
// gateway's own files, which no agent may see. The agents' commands are
// absolute already (resolveAgents), as the sandbox needs them.
func setupConfinement(ctx context.Context, cfg *serveConfig, auth bool, hide []string, log *slog.Logger) (*confinement, error) {
	c := &confinement{}
	if cfg.confine.sandbox == sandbox.ModeBwrap {
		sb, err := sandbox.New(ctx, sandbox.Options{ReadOnly: cfg.confine.readOnly, ReadWrite: cfg.confine.readWrite, Hide: hide})
		if err != nil {
			return nil, fmt.Errorf("--sandbox bwrap: %w", err)
		}
		homes, err := workspace.New(cfg.confine.homes)
		if err != nil {
			return nil, fmt.Errorf("--sandbox-homes: %w", err)
		}
		c.sandbox, c.homes = sb, homes
		if cfg.confine.network == "proxy" {
			if c.egress, err = egress.NewPolicy(cfg.confine.egress); err != nil {
				return nil, err
			}
			if c.helper, err = os.Executable(); err != nil {
				return nil, fmt.Errorf("--sandbox-network proxy: finding this executable: %w", err)
			}
		} else if auth {
			log.Warn("sandboxed agents share the host's network (--sandbox-network host): they can reach the gateway's port, its store and every service of the host and its network")
		}
	} else if auth {
		log.Warn("agents run unconfined, as the gateway's own user (--sandbox none): any user's agent can read the gateway's files, other users' data, and signal the gateway")
	}
	lim, err := setupLimits(cfg.confine.limits, auth, limits.Setup, log)
	if err != nil {
		return nil, err
	}
	lim.Log = log
	c.limits = lim
	for _, r := range lim.Reaped() {
		args := []any{"cgroup", r.Group, "killed", r.Killed}
		if r.Err != nil {
			args = append(args, "error", r.Err.Error())
		}
		log.Warn("killed the processes a gateway that is gone left in its agents' cgroups", args...)
	}
	network := "host"
	if c.egress != nil {
		network = "proxy"
	}
	if cfg.confine.nice == 0 {
		log.Warn(agentNiceZeroWarning)
	}
	log.Info("agents confined", "sandbox", cfg.confine.sandbox, "network", network, "egress_allowed", []string(cfg.confine.egress), "limits", lim.Describe(), "agent_nice", cfg.confine.nice)
	return c, nil
}

// agentNiceZeroWarning is logged at start with --agent-nice 0.
const agentNiceZeroWarning = "agents run at the gateway's own CPU priority (--agent-nice 0): busy agents, or one in a loop, take CPUs from the gateway, which relays every session"

// setupLimits sets up the limits l with setup (limits.Setup, but in
// tests). With authentication every limit must be enforced. Without, the
// cgroup limits that cannot be are logged and left off, and so are the
// resource limits where the platform has none (darwin).
func setupLimits(l limits.Limits, auth bool, setup func(limits.Limits) (*limits.Controller, error), log *slog.Logger) (*limits.Controller, error) {
	lim, err := setup(l)
	if err == nil || auth {
		return lim, err
	}
	if errors.Is(err, limits.ErrUnsupported) {
		log.Warn("agents run without limits", "error", err.Error())
		return setup(limits.Limits{})
	}
	log.Warn("agents run without cgroup limits", "error", err.Error())
	return setup(limits.Limits{NoFile: l.NoFile, FileSize: l.FileSize})
}

// gatewayFiles lists the files of the gateway's own that no agent may see:
// its token, OIDC key, config, replica secret and store files.
func gatewayFiles(cfg *serveConfig) []string {
	var files []string
	for _, f := range []string{cfg.authTokens, cfg.oidc.JWKSFile, cfg.confine.configPath, cfg.replicaSecretFile, cfg.storeFile} {
		if f != "" {
			if abs, err := filepath.Abs(f); err == nil {
				files = append(files, abs)
			}
		}
	}
	if path, ok := strings.CutPrefix(cfg.store, "bolt:"); ok {
		if abs, err := filepath.Abs(path); err == nil {
			files = append(files, abs)
		}
	}
	return files
}
