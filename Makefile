# atf — run `make help` for the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
ADDR  ?= 127.0.0.1:8080
DB    ?= .atf/atf.db

.PHONY: help run build-handlers test bench lint tidy clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

run: build-handlers ## start atf dev on $(ADDR) with the example lambdas of functions/workers
	$(GO) build -o $(BIN)/atf ./cmd/atf
	$(BIN)/atf dev --addr $(ADDR) --db $(DB) --handlers $(BIN)/handlers

build-handlers: ## build each example lambda in functions/workers into bin/handlers
	@mkdir -p $(BIN)/handlers
	@for d in functions/workers/*/; do n=$$(basename $$d); $(GO) build -o $(BIN)/handlers/$$n ./$$d || exit 1; done

test: ## run every test, then print how many ran, passed, failed and were skipped
	@mkdir -p $(BIN)
	@set -o pipefail; $(GO) test -count=1 -json ./... | tee $(BIN)/test.json | $(GO) run ./cmd/testsummary

bench: ## run the benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint: ## go vet and gofmt
	$(GO) vet ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

tidy: ## go mod tidy
	$(GO) mod tidy

clean: ## remove build output and the local database
	rm -rf $(BIN) .atf
