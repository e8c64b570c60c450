#!/usr/bin/env bash
# Fails when regenerating clients/ts/src/gen from proto/ would change it:
# generates into a temporary directory and compares. Needs `npm ci` in
# clients/ts (for protoc-gen-es). Run from anywhere.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if [ ! -x clients/ts/node_modules/.bin/protoc-gen-es ]; then
  echo "clients/ts: protoc-gen-es is not installed: run 'npm ci --prefix clients/ts'" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go tool -modfile=tools/go.mod buf generate --template buf.gen.ts.yaml -o "$tmp"
if ! diff -r "$tmp/clients/ts/src/gen" clients/ts/src/gen >/dev/null; then
  echo "clients/ts/src/gen is stale: run 'make generate-ts' (or 'npm run generate' in clients/ts) and commit:" >&2
  diff -r "$tmp/clients/ts/src/gen" clients/ts/src/gen | head -40 >&2 || true
  exit 1
fi
