# acp-gateway developer tasks. `make help` lists them.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO        ?= go
# Developer tools live in a module of their own, tools/go.mod, so that the
# product's go.mod requires only what it links.
TOOL      := $(GO) tool -modfile=$(CURDIR)/tools/go.mod
BUF       := $(TOOL) buf
GOLANGCI  := $(TOOL) golangci-lint
NPM       ?= npm
# A count, not a duration: with a duration, go1.26's fuzz coordinator can
# fail a target with "context deadline exceeded" at the deadline, with no
# failing input (go.dev/issue/75804, fixed in go1.27). 50000 runs take
# seconds to minutes a target, as the machine and its load allow: on a
# shared 2-core machine 1.5 to 3.5 s for most acpjson and agent targets
# and for eventjson's (3.3 s), 32 s for FuzzDecoderMatchesOracle and 12 s
# for FuzzReader (one run each; FuzzReader's seeds nest 10,001 levels);
# in CI, 139 to 264 s for FuzzApply (the 19 to 37 s once measured for it
# no longer held); 72 to 84 s for FuzzStoredEventsReadBack on the
# 2-core machine (its seeds hold JSON 6,000 and 9,900 levels deep). The
# service target was not timed again.
FUZZTIME  ?= 50000x

.PHONY: help
help: ## Describe the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

.PHONY: run
run: ## Run the gateway on 127.0.0.1:8080
	$(GO) run ./cmd/acp-gateway serve

.PHONY: ci
ci: deps lint breaking checkgenerate checkgenerate-ts checkconsole release test fuzz benchcheck ## Everything CI runs, on a fresh machine
	@echo "ci: all checks passed"

.PHONY: release
release: ## Build the release archives into dist/ (linux and darwin, amd64 and arm64, SHA256SUMS; VERSION=v1.2.3 to name one)
	./scripts/release.sh

.PHONY: deps
deps: ## Install and start what the tests need
	./scripts/deps.sh

.PHONY: test
test: ## Run every test with the race detector (deploy/ is a module of its own)
	$(GO) test -race -count=1 ./...
	$(GO) -C deploy test -race -count=1 ./...

.PHONY: test-short
test-short: ## The fast tier: the tests that need nothing but Go (go test -short)
	$(GO) test -short ./...

.PHONY: lint
lint: ## gofmt, golangci-lint (.golangci.yml, go vet among its linters) and buf lint
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GOLANGCI) run ./...
	cd deploy && $(GOLANGCI) run --config ../.golangci.yml ./...
	$(BUF) lint

.PHONY: breaking
breaking: ## Fail when proto/ breaks the wire or JSON encoding of the main branch (buf breaking)
	@# A clone checked out on another branch has main only as origin/main.
	@against='.git#branch=main'; \
	if ! git rev-parse -q --verify refs/heads/main >/dev/null; then against='.git#ref=origin/main'; fi; \
	echo "$(BUF) breaking --against '$$against'"; \
	$(BUF) breaking --against "$$against"

.PHONY: generate
generate: ## Regenerate gen/ from proto/
	$(BUF) generate

.PHONY: checkgenerate
checkgenerate: generate ## Fail when regenerating changes gen/
	@if [ -n "$$(git status --porcelain -- gen)" ]; then \
		echo "gen/ is stale: run 'make generate' and commit:"; git status --porcelain -- gen; exit 1; fi

.PHONY: generate-ts
generate-ts: ## Regenerate the TypeScript client (clients/ts/src/gen) from proto/
	$(BUF) generate --template buf.gen.ts.yaml

.PHONY: checkgenerate-ts
checkgenerate-ts: ## Fail when regenerating clients/ts/src/gen would change it
	./clients/ts/checkgenerate.sh

.PHONY: console
console: ## Rebuild the web console into gateway/console/dist
	$(NPM) --prefix web/console run build

.PHONY: checkconsole
checkconsole: ## Type-check the web console; fail when gateway/console/dist is stale
	$(NPM) --prefix web/console run check

.PHONY: screenshots
screenshots: ## Rewrite docs/screenshots/console-*.png from the browser tests
	$(GO) test -count=1 -run '^TestBrowser(Console)?$$' ./gateway/console -update-screenshots

.PHONY: bench-cmd
bench-cmd: ## Run acp-gateway-bench --quick (writes bench.json)
	$(GO) run ./cmd/acp-gateway-bench --quick --json bench.json

.PHONY: checkdeploy
checkdeploy: ## Check deploy/: Dockerfile, Kubernetes overlays, Prometheus rules, Grafana dashboard
	$(GO) -C deploy test -count=1 ./...

.PHONY: fuzz
fuzz: ## Run each fuzz target briefly (FUZZTIME, default 50000x: runs, not seconds)
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeUpdate$$' -fuzztime=$(FUZZTIME) ./gateway/acpjson
	$(GO) test -run='^$$' -fuzz='^FuzzDecodedUpdateMarshals$$' -fuzztime=$(FUZZTIME) ./gateway/acpjson
	$(GO) test -run='^$$' -fuzz='^FuzzReader$$' -fuzztime=$(FUZZTIME) ./gateway/acpjson
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeNotification$$' -fuzztime=$(FUZZTIME) ./gateway/acpjson
	$(GO) test -run='^$$' -fuzz='^FuzzOnePassMatchesJSONRPC2$$' -fuzztime=$(FUZZTIME) ./gateway/agent
	$(GO) test -run='^$$' -fuzz='^FuzzApply$$' -fuzztime=$(FUZZTIME) ./gateway/merge
	$(GO) test -run='^$$' -fuzz='^FuzzDecoderMatchesOracle$$' -fuzztime=$(FUZZTIME) ./gateway/acpjson
	$(GO) test -run='^$$' -fuzz='^FuzzNotificationMatchesOracle$$' -fuzztime=$(FUZZTIME) ./gateway/acpjson
	$(GO) test -run='^$$' -fuzz='^FuzzRequestsMatchOracle$$' -fuzztime=$(FUZZTIME) ./gateway/acpjson
	$(GO) test -run='^$$' -fuzz='^FuzzRequests$$' -fuzztime=$(FUZZTIME) ./gateway/service
	$(GO) test -run='^$$' -fuzz='^FuzzMarshalMatchesProtojson$$' -fuzztime=$(FUZZTIME) ./internal/eventjson
	$(GO) test -run='^$$' -fuzz='^FuzzStoredEventsReadBack$$' -fuzztime=$(FUZZTIME) ./gateway/session
	$(GO) test -run='^$$' -fuzz='^FuzzReadFrame$$' -fuzztime=$(FUZZTIME) ./statestore/boltstore

.PHONY: benchcheck
benchcheck: ## Run every benchmark once so none rots
	$(GO) test -run='^$$' -bench=. -benchtime=1x ./...

.PHONY: bench
bench: ## Run the benchmarks with allocation counts
	$(GO) test -run='^$$' -bench=. -benchmem ./...
