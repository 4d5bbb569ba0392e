# atf — run `make help` for the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
ADDR  ?= 127.0.0.1:8080
DB    ?= .atf/atf.db

.PHONY: help run build invoke chaos build-handlers test api-contract schemathesis-cli bench bench-template fuzz lint golangci-lint tidy clean emulators emulators-stop

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

run: build-handlers ## start atf dev on $(ADDR) with the example lambdas of functions/workers
	$(GO) build -o $(BIN)/atf ./cmd/atf
	$(BIN)/atf dev --addr $(ADDR) --db $(DB) --handlers $(BIN)/handlers --registry lambdas.json

build-handlers: ## build each example lambda in functions/workers into bin/handlers
	@mkdir -p $(BIN)/handlers
	@for d in functions/workers/*/; do n=$$(basename $$d); $(GO) build -o $(BIN)/handlers/$$n ./$$d || exit 1; done

# The AWS entry points: a bootstrap binary and a zip each, for the provided.al2023 runtime on arm64.
FUNCTIONS := api consumer status executor $(patsubst functions/%/,%,$(wildcard functions/workers/*/))
MAX_BINARY_MB := 20

build: ## build every function for Lambda (arm64, provided.al2023) into bin/lambda/<name>.zip; prints sizes
	@rm -rf $(BIN)/lambda
	@printf '%-22s %10s %10s\n' FUNCTION BINARY ZIP
	@for f in $(FUNCTIONS); do \
	  n=$${f//\//-}; out=$(BIN)/lambda/$$n; mkdir -p $$out; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags='-s -w' -tags lambda.norpc -o $$out/bootstrap ./functions/$$f || exit 1; \
	  (cd $$out && python3 -m zipfile -c ../$$n.zip bootstrap) || exit 1; \
	  bin=$$(stat -c %s $$out/bootstrap); zip=$$(stat -c %s $(BIN)/lambda/$$n.zip); \
	  awk -v n=$$n -v b=$$bin -v z=$$zip 'BEGIN { printf "%-22s %8.1fMB %8.1fMB\n", n, b/1048576, z/1048576 }'; \
	  [ $$bin -le $$(( $(MAX_BINARY_MB) * 1048576 )) ] || { echo "$$n: binary over $(MAX_BINARY_MB) MB"; exit 1; }; \
	done

# The example lambdas as the stack passes lambdas to the functions (ATF_LAMBDAS).
comma := ,
WORKERS := $(notdir $(patsubst %/,%,$(wildcard functions/workers/*/)))
LAMBDAS_JSON := [$(subst } {,}$(comma){,$(foreach w,$(WORKERS),{"name":"$(w)"}))]

invoke: build-handlers ## run a function once on a sample event, on the emulators: make invoke FN=api EVENT=events/api/get.json
	@[ -n "$(FN)" ] && [ -n "$(EVENT)" ] || { echo "usage: make invoke FN=api|consumer|status|workers/<name> EVENT=events/<file>.json"; exit 2; }
	@env=$$(localstack/emulators start) || exit 1; eval "$$env"; \
	$(GO) run ./cmd/atf create --handlers $(BIN)/handlers >/dev/null || exit 1; \
	ATF_TABLE=atf-dev ATF_QUEUE_PREFIX=atf-dev ATF_LAMBDAS='$(LAMBDAS_JSON)' \
	ATF_LAMBDA=$(if $(findstring workers/,$(FN)),$(notdir $(FN)),$(if $(filter status,$(FN)),echo)) ATF_INVOKE=$(EVENT) $(GO) run ./functions/$(FN)

test: ## every test (AWS suites on DynamoDB Local and moto, started and stopped here), then make api-contract and make infra-test
	@mkdir -p $(BIN)
	@set -o pipefail; \
	was_up=$$(localstack/emulators status >/dev/null 2>&1 && echo 1 || true); \
	env=$$(localstack/emulators start) || exit 1; eval "$$env"; \
	[ -n "$$was_up" ] || trap 'localstack/emulators stop' EXIT; \
	ATF_AWS_TESTS=require $(GO) test -count=1 -json ./... | tee $(BIN)/test.json | $(GO) run ./cmd/testsummary
	@$(MAKE) --no-print-directory api-contract
	@$(MAKE) --no-print-directory infra-test

# The HTTP API's OpenAPI contract (shared/adapter/httpapi/openapi.json) against atf dev: schemathesis,
# pinned and installed into .tools/venv, generates API_CONTRACT_EXAMPLES requests per operation
# (and their negations, and sequences of calls) from a fixed seed, and fails on a 5xx, an answer off
# the contract, or a request against it that is accepted. About half a minute.
SCHEMATHESIS_VERSION  := 4.32.5
API_CONTRACT_EXAMPLES ?= 50
API_CONTRACT_SEED     ?= 1

schemathesis-cli: ## install the pinned schemathesis into .tools/venv (once)
	@[ "$$(.tools/venv/bin/schemathesis --version 2>/dev/null)" = "schemathesis, version $(SCHEMATHESIS_VERSION)" ] || \
	  { python3 -m venv .tools/venv && .tools/venv/bin/pip install -q --disable-pip-version-check schemathesis==$(SCHEMATHESIS_VERSION); }

api-contract: build-handlers schemathesis-cli ## schemathesis against atf dev on a free port (embedded store): no 5xx, nothing off the OpenAPI contract
	@$(GO) build -o $(BIN)/atf ./cmd/atf
	shared/adapter/httpapi/schemathesis-run $(BIN)/atf .tools/venv/bin/schemathesis $(API_CONTRACT_EXAMPLES) $(API_CONTRACT_SEED)

CHAOS_TASKS ?= 20000
chaos: ## the chaos scenarios, long (CHAOS_TASKS), on the emulators too: one summary line per scenario
	@set -o pipefail; \
	was_up=$$(localstack/emulators status >/dev/null 2>&1 && echo 1 || true); \
	env=$$(localstack/emulators start) || exit 1; eval "$$env"; \
	[ -n "$$was_up" ] || trap 'localstack/emulators stop' EXIT; \
	ATF_AWS_TESTS=require ATF_CHAOS_TASKS=$(CHAOS_TASKS) $(GO) test -count=1 -v -run '^TestChaos' -timeout 30m ./cmd/atf ./shared/local \
	  | grep -E '^(chaos|--- FAIL|FAIL|ok)|_test.go:'

# make bench: the Go benchmarks of the hot paths (bin/bench-go.txt, for benchstat), then the bench
# command (bench/): throughput next to River and asynq (bench/peers, their servers started here),
# latency, and the AWS cost per task on the emulators. The emulators and the peers' servers are
# stopped again if this started them.
BENCH_CONCURRENCY ?= 16
BENCH_GO_FLAGS := $(if $(QUICK),-count=1 -benchtime=100x,-count=5)
bench: ## benchmarks, not part of make test: prints the table, writes bench/results.json (QUICK=1: smaller counts)
	@set -eo pipefail; mkdir -p $(BIN); \
	was_up=$$(localstack/emulators status >/dev/null 2>&1 && echo 1 || true); \
	env=$$(localstack/emulators start) || exit 1; eval "$$env"; \
	peers=; cleanup() { [ -z "$$peers" ] || bench/peers/services stop >/dev/null 2>&1; [ -n "$$was_up" ] || localstack/emulators stop; }; \
	trap cleanup EXIT; \
	if [ -x bench/peers/services ]; then env=$$(bench/peers/services start) && eval "$$env" && peers=1; fi; \
	$(GO) test -run '^$$' -bench . -benchmem $(BENCH_GO_FLAGS) ./shared/task ./shared/store/sqlitestore ./shared/store/dynamostore | tee $(BIN)/bench-go.txt; \
	$(MAKE) --no-print-directory bench-template >/dev/null || echo "bench: no dev template: the idle bill has the consumer alone"; \
	$(GO) run ./bench $(if $(QUICK),-quick) -concurrency $(BENCH_CONCURRENCY) -template $(BENCH_TEMPLATE)

# The dev template that the bench's idle bill prices: the CDK app run as `cdk synth -c env=dev`
# runs it (cdk.json's context, CDK_OUTDIR), without the CLI and cdk-nag's report, so offline.
BENCH_TEMPLATE := $(BIN)/bench-cdk.out/atf-dev.template.json
bench-template: build ## synthesize the dev template for make bench into bin/bench-cdk.out (no CDK CLI needed)
	@rm -rf $(BIN)/bench-cdk.out
	$(GO) -C infra build -o ../$(BIN)/atf-infra .
	CDK_OUTDIR=$(BIN)/bench-cdk.out CDK_CONTEXT_JSON="$$(node -e 'const c = require("./cdk.json").context; c.env = "dev"; console.log(JSON.stringify(c))')" \
	  $(BIN)/atf-infra 2>&1 | grep -v '^!!'; exit $${PIPESTATUS[0]}
	@ls $(BENCH_TEMPLATE)

FUZZTIME ?= 30s

fuzz: ## run every fuzz target (func Fuzz* in a *_test.go) for FUZZTIME each [30s], one after another
	@set -e; for pkg in $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}:{{.Dir}}{{end}}' ./...); do \
	  for fn in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $${pkg#*:}/*_test.go | cut -c6-); do \
	    echo "== $$fn $${pkg%%:*}"; \
	    $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $${pkg%%:*}; \
	  done; \
	done

# golangci-lint, pinned and installed into .tools/ (once); .golangci.yml says what it checks and why
# each exclusion. It lints the root module and infra/ (a module of its own) with the same config.
GOLANGCI_LINT_VERSION := 2.15.0
GOLANGCI_LINT := $(CURDIR)/.tools/bin/golangci-lint

golangci-lint: ## install the pinned golangci-lint into .tools/ (once)
	@$(GOLANGCI_LINT) version 2>/dev/null | grep -q 'version $(GOLANGCI_LINT_VERSION) ' || \
	  GOBIN=$(CURDIR)/.tools/bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$(GOLANGCI_LINT_VERSION)

lint: golangci-lint ## go vet, gofmt and golangci-lint (.golangci.yml), on the root module and infra/
	$(GO) vet ./...
	@out=$$(gofmt -l $$(find . -path ./.tools -prune -o -name '*.go' -print)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GOLANGCI_LINT) run ./...
	cd infra && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...

emulators: ## start DynamoDB Local and moto (SQS, EventBridge) without Docker; prints the AWS_* env to export
	@localstack/emulators start

emulators-stop: ## stop the emulators
	@localstack/emulators stop

# The infrastructure: the CDK app in infra/ (a Go module of its own, so that go test ./... here
# never compiles the CDK), one stack per environment of infra/environments.json, built from the
# lambda registry lambdas.json. The CDK CLI and cfn-lint are pinned and installed into .tools/.
CDK_VERSION      := 2.1148.1
CFN_LINT_VERSION := 1.58.0
TOOLS := .tools
CDK   := $(TOOLS)/node_modules/.bin/cdk
CFN_LINT := $(TOOLS)/venv/bin/cfn-lint
ENV ?= dev

cdk-cli: ## install the pinned CDK CLI into .tools/ (once)
	@[ "$$($(CDK) --version 2>/dev/null | cut -d' ' -f1)" = "$(CDK_VERSION)" ] || \
	  npm install --prefix $(TOOLS) --no-audit --no-fund --loglevel=error --save-exact aws-cdk@$(CDK_VERSION)

cfn-lint-cli: ## install the pinned cfn-lint into .tools/venv (once)
	@[ "$$($(CFN_LINT) --version 2>/dev/null)" = "cfn-lint $(CFN_LINT_VERSION)" ] || \
	  { python3 -m venv $(TOOLS)/venv && $(TOOLS)/venv/bin/pip install -q --disable-pip-version-check cfn-lint==$(CFN_LINT_VERSION); }

synth: build cdk-cli ## synthesize every environment into cdk.out/, offline (cdk-nag errors fail it)
	@rm -rf cdk.out
	$(CDK) synth --quiet 2>&1 | grep -v '^!!'; exit $${PIPESTATUS[0]}
	@ls cdk.out/*.template.json

diff: build cdk-cli ## compare environment ENV with what is deployed: make diff ENV=staging (AWS credentials)
	$(CDK) diff -c env=$(ENV) atf-$(ENV)

deploy: build cdk-cli ## deploy environment ENV: make deploy ENV=dev (AWS credentials, account bootstrapped)
	$(CDK) deploy -c env=$(ENV) atf-$(ENV)

infra-test: cfn-lint-cli ## the infra checks: registry, template assertions and cdk-nag, cfn-lint of make synth
	$(GO) test -count=1 ./shared/registry/
	cd infra && $(GO) vet ./... && $(GO) test -count=1 ./...
	@$(MAKE) --no-print-directory synth
	@# W3005 (a DependsOn that a reference implies) is CDK's own: a function depends on its role.
	$(CFN_LINT) --ignore-checks W3005 -- cdk.out/*.template.json
	@echo "infra-test: registry, template assertions, cdk-nag and cfn-lint passed"

tidy: ## go mod tidy
	$(GO) mod tidy

clean: ## remove build output, synthesized templates and the local database
	rm -rf $(BIN) .atf cdk.out .schemathesis
