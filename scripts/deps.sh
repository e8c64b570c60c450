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

# Go modules, including the pinned buf and protoc plugins run by `go tool`.
go mod download
