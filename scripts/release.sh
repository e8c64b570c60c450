#!/usr/bin/env bash
# Builds the release archives into dist/: for each platform a tar.gz of
# the acp-gateway binary (static: CGO_ENABLED=0, -trimpath), README.md
# and LICENSE when there is one, and dist/SHA256SUMS over them. The
# version and revision are stamped into internal/buildinfo.
#
#   scripts/release.sh            # version from git describe
#   VERSION=v1.2.3 scripts/release.sh
#
# Linux and darwin, amd64 and arm64. A darwin build lacks what needs
# Linux (the bubblewrap sandbox, the per-agent limits, PR_SET_PDEATHSIG,
# pidfd): README.md's Install section says what that means.
set -euo pipefail
cd "$(dirname "$0")/.."

platforms=${PLATFORMS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"}
revision=$(git rev-parse HEAD)
version=${VERSION:-$(git describe --tags --always --dirty)}
pkg=github.com/acp-gateway/acp-gateway/internal/buildinfo
ldflags="-s -w -X $pkg.version=$version -X $pkg.revision=$revision"

rm -rf dist
mkdir -p dist
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for platform in $platforms; do
  os=${platform%/*} arch=${platform#*/}
  name="acp-gateway_${version}_${os}_${arch}"
  mkdir -p "$work/$name"
  echo "building $name"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$work/$name/acp-gateway" ./cmd/acp-gateway
  cp README.md "$work/$name/"
  if [ -f LICENSE ]; then cp LICENSE "$work/$name/"; fi
  # Reproducible: sorted names, no owner, the commit's time.
  tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@$(git log -1 --format=%ct)" -czf "dist/$name.tar.gz" "$name"
done
(cd dist && sha256sum ./*.tar.gz | sed 's# \./# #' > SHA256SUMS)
cat dist/SHA256SUMS
