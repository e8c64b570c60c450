#!/usr/bin/env bash
# Installs and starts what the test suite needs on a fresh machine. Safe to
# run again: each step checks before it acts.
set -euo pipefail

# Redis at 127.0.0.1:6379 for the Redis state store tests.
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  if ! command -v redis-server >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  fi
  mkdir -p /tmp/acp-gateway-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" \
    --appendonly no --dir /tmp/acp-gateway-redis --logfile /tmp/acp-gateway-redis/redis.log
  for _ in $(seq 50); do
    redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null

# bubblewrap for the agents' sandbox (gateway/sandbox and the e2e,
# integration and deploy tests run it for real), and pgrep/pkill, which the
# sandbox tests' hostile agent uses.
if ! command -v bwrap >/dev/null 2>&1 || ! command -v pgrep >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq bubblewrap procps >/dev/null
fi

# The web console's browser test drives Debian's chromium (playwright-core
# never downloads a browser of its own).
if [ ! -x /usr/bin/chromium ]; then
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
# Node.js 20 or later (Debian 12's nodejs is 18).
if [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 20 ]; then
  echo "deps: Node.js 20 or later is needed, found $(node --version 2>/dev/null || echo none)" >&2
  exit 1
fi
# protoc-gen-es for clients/ts; esbuild, TypeScript and playwright-core for web/console.
npm ci --prefix clients/ts --no-audit --no-fund
npm ci --prefix web/console --no-audit --no-fund
# The real ACP agents and clients of integration/: the TypeScript SDK's
# example agent and the Node Connect client, then the Go SDK's example agent
# and grpcurl, built once here to fill the caches the tests' own
# `go install` then hits (a cold grpcurl build takes over a minute).
npm ci --prefix integration/node --no-audit --no-fund
# Claude Code's ACP adapter, a project of its own: about 400 MB installed
# (the Claude Agent SDK bundles a native claude binary for this platform),
# so it is installed only when `npm ls` finds its tree incomplete or of
# other versions; npm's cache serves a reinstall, bounded in time.
if ! npm ls --prefix integration/claude-agent --all >/dev/null 2>&1; then
  timeout 900 npm ci --prefix integration/claude-agent --no-audit --no-fund
fi
gobin=$(mktemp -d)
GOFLAGS= GOWORK=off GOBIN="$gobin" go install github.com/coder/acp-go-sdk/example/agent@v0.13.0
GOFLAGS= GOWORK=off GOBIN="$gobin" go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4
rm -rf "$gobin"

# promtool for deploy/'s tests (Debian's prometheus package has it).
if ! command -v promtool >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

# websocketd, the stdio-to-WebSocket bridge acp-gateway-bench compares with.
if ! command -v websocketd >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq websocketd >/dev/null
fi

# Go modules: the product's, with the pinned protoc plugins run by `go tool`,
# and tools/go.mod's developer tools (buf, golangci-lint), run as
# `go tool -modfile=tools/go.mod NAME`.
go mod download
go mod download -modfile=tools/go.mod
