# atf — run `make help` for the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
ADDR  ?= 127.0.0.1:8080
DB    ?= .atf/atf.db

.PHONY: synth diff deploy destroy infra-test cdk-cli cfn-lint-cli
.PHONY: infra-scale help run build invoke chaos build-handlers test ui-tools dashboard-vendor api-contract schemathesis-cli bench bench-smoke bench-template fuzz lint golangci-lint tidy clean emulators emulators-stop

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

run: ## start atf dev on $(ADDR) serving the lambdas of lambdas.json (Go handlers built from functions/workers, programs from their paths)
	@echo "make run: building the example lambdas (functions/workers/*) into $(BIN)/handlers and the CLI into $(BIN)/atf;"
	@echo "make run: a first build downloads and compiles the dependencies, which takes a few minutes"
	@$(MAKE) --no-print-directory build-handlers
	$(GO) build -o $(BIN)/atf ./cmd/atf
	@echo "make run: starting atf dev; it serves http://$(ADDR) once it logs \"atf dev is up\""
	$(BIN)/atf dev --addr $(ADDR) --db $(DB) --handlers $(BIN)/handlers --registry lambdas.json

build-handlers: ## build each example lambda in functions/workers into bin/handlers
	@mkdir -p $(BIN)/handlers
	@for d in functions/workers/*/; do n=$$(basename $$d); echo "  build $(BIN)/handlers/$$n"; $(GO) build -o $(BIN)/handlers/$$n ./$$d || exit 1; done

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

# make build and make cdk-cli come first: functions' TestDeployedStack deploys the dev stack into a
# moto of its own (make e2e-deployed), and the template references the zips.
test: ui-tools build cdk-cli ## every test (AWS suites on DynamoDB Local and moto, started and stopped here; the dashboard in Chromium; the dev stack deployed into moto and run), then make api-contract and make infra-test
	@mkdir -p $(BIN)
	@set -o pipefail; \
	was_up=$$(localstack/emulators status >/dev/null 2>&1 && echo 1 || true); \
	env=$$(localstack/emulators start) || exit 1; eval "$$env"; \
	export ATF_DEPLOY_MOTO_PORT=$${ATF_DEPLOY_MOTO_PORT:-5101}; \
	stop() { localstack/deploy-local stop; [ -n "$$was_up" ] || localstack/emulators stop; }; trap stop EXIT; \
	ATF_AWS_TESTS=require ATF_UI_TESTS=require $(GO) test -count=1 -timeout 30m -json ./... | tee $(BIN)/test.json | $(GO) run ./cmd/testsummary && \
	ATF_AWS_TESTS=require $(GO) -C infra test -count=1 ./doctor/
	@$(MAKE) --no-print-directory api-contract
	@$(MAKE) --no-print-directory infra-test

# The dashboard's Playwright suite (tests/ui, run by the Go test TestDashboardUI of
# shared/adapter/dashboard, one subtest per Playwright test) drives Debian's chromium: Playwright's
# own browser builds cannot be downloaded here. ui-tools installs both, once, without a prompt.
ui-tools: ## install Debian's chromium (apt-get, as root or with sudo) and the pinned Playwright into tests/ui/node_modules (once)
	@command -v chromium >/dev/null || { \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@[ "$$(node -p 'require("./tests/ui/node_modules/playwright/package.json").version' 2>/dev/null)" = "$$(node -p 'require("./tests/ui/package.json").dependencies.playwright')" ] || \
	  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix tests/ui --no-audit --no-fund --loglevel=error

# The dashboard's vendored htm + Preact (shared/adapter/dashboard/static/vendor): fetched again from
# npm and checked against the committed file's SHA-256.
HTM_VERSION := 3.1.1
HTM_SHA256  := 72284e8e9079c87817145df1110f74e8a2aa040b2fc384922e18dfcb46fc1fd7
dashboard-vendor: ## fetch the dashboard's vendored htm/Preact module from npm again and check its SHA-256
	@d=$$(mktemp -d) && trap 'rm -rf $$d' EXIT && (cd $$d && npm pack --silent htm@$(HTM_VERSION) >/dev/null && tar xzf htm-$(HTM_VERSION).tgz) && \
	  echo "$(HTM_SHA256)  $$d/package/preact/standalone.module.js" | sha256sum -c --quiet && \
	  cp $$d/package/preact/standalone.module.js shared/adapter/dashboard/static/vendor/htm-preact-$(HTM_VERSION).module.js && \
	  cp $$d/package/LICENSE shared/adapter/dashboard/static/vendor/LICENSE-htm && echo "vendored htm $(HTM_VERSION): checksum ok"

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
	ATF_AWS_TESTS=require ATF_CHAOS_TASKS=$(CHAOS_TASKS) $(GO) test -count=1 -v -run '^TestChaos' -timeout 45m ./cmd/atf ./shared/local \
	  | grep -E '^(chaos|--- FAIL|FAIL|ok)|_test.go:|^        (lost|overlaps|backwards|changed|over max) \[|^(panic|fatal error):'

# make bench: the Go benchmarks of the hot paths (bin/bench-go.txt, for benchstat), then the bench
# command (bench/): throughput next to River and asynq (bench/peers, their servers started here),
# latency, the AWS cost per task on the emulators (and, from it, a month of a steady 10,000 tasks a
# second on demand and provisioned: docs/capacity.md), and the idle consumer over 10, 100 and 300
# lambdas with its time budget and the idle bill of 100 (docs/capacity.md, "An idle environment of
# many lambdas"). The emulators and the peers' servers are stopped again if this started them.
# SMOKE=1 runs every step with tiny counts, the template step left out (bench-smoke).
BENCH_CONCURRENCY ?= 16
BENCH_OUT ?= bench/results.json
BENCH_GO_FLAGS := $(if $(SMOKE),-count=1 -benchtime=1x,$(if $(QUICK),-count=1 -benchtime=100x,-count=5))
BENCH_MODE := $(if $(SMOKE),-smoke,$(if $(QUICK),-quick))
bench: ## benchmarks, not part of make test: prints the table, writes bench/results.json (QUICK=1: smaller counts)
	@set -eo pipefail; mkdir -p $(BIN); \
	was_up=$$(localstack/emulators status >/dev/null 2>&1 && echo 1 || true); \
	env=$$(localstack/emulators start) || exit 1; eval "$$env"; \
	peers=; cleanup() { [ -z "$$peers" ] || bench/peers/services stop >/dev/null 2>&1 || true; [ -n "$$was_up" ] || localstack/emulators stop; }; \
	trap cleanup EXIT; \
	if [ -x bench/peers/services ]; then \
	  peers=1; env=$$(bench/peers/services start) || { echo "bench: the peers' servers did not start: River and asynq are left out"; env=; }; eval "$$env"; \
	fi; \
	$(GO) test -run '^$$' -bench . -benchmem $(BENCH_GO_FLAGS) ./shared/task ./shared/store/sqlitestore ./shared/store/dynamostore | tee $(BIN)/bench-go.txt; \
	if [ -z "$(SMOKE)" ]; then $(MAKE) --no-print-directory bench-template >/dev/null || echo "bench: no dev template: the idle bill has the consumer alone"; fi; \
	$(GO) run ./bench $(BENCH_MODE) -concurrency $(BENCH_CONCURRENCY) -template $(BENCH_TEMPLATE) -out $(BENCH_OUT)

# make bench-smoke: make bench from scratch with tiny counts (the emulators and the peers' servers
# started and stopped as there), checking that every part runs and the tables are printed, not
# what they say. CI runs it (.ci/run). It writes its results to a temporary file, never to
# bench/results.json.
BENCH_SMOKE_TABLE := '^\| measurement \| result \|$$' '^\| atf embedded throughput: ' '^\| peak RSS of that burn-down ' \
  '^\| burn-down on a table holding ' '^\| River .* tasks/s \(atf/River ' '^\| asynq .* tasks/s \(atf/asynq ' \
  '^\| atf embedded delivery latency ' '^\| atf delivery latency on the emulators ' '^\| schedule API ' \
  '^\| atf embedded wait for a result ' '^\| immediate, scheduled in batches of 100 \| ' '^\| DynamoDB writes \| ' '^\| consumer idle, per month: ' \
  '^\| lambdas × priorities × shards \| ' '^\| target \| wanted \| this run \| \|$$'
bench-smoke: ## make bench with tiny counts from a clean state; fails unless every table row is printed (CI)
	@set -eo pipefail; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory bench SMOKE=1 BENCH_OUT=$$tmp/results.json | tee $$tmp/out.txt; \
	[ -s $$tmp/results.json ] || { echo "bench-smoke: no results written"; exit 1; }; \
	for row in $(BENCH_SMOKE_TABLE); do \
	  grep -Eq "$$row" $$tmp/out.txt || { echo "bench-smoke: the table has no row matching $$row"; exit 1; }; \
	done; \
	echo "bench-smoke: every part ran and the tables were printed"

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
# never compiles the CDK): per environment of infra/environments.json, the core stack atf-<env>
# and a stack per lambda group of the registry, atf-<env>-<stack> (infra/README.md). The CDK CLI
# and cfn-lint are pinned and installed into .tools/.
CDK_VERSION      := 2.1148.1
CFN_LINT_VERSION := 1.58.0
TOOLS := .tools
CDK   := $(TOOLS)/node_modules/.bin/cdk
CFN_LINT := $(TOOLS)/venv/bin/cfn-lint
ENV ?= dev
# REGISTRY is the lambda registry the app reads; ENVIRONMENTS the environments file.
REGISTRY     ?= lambdas.json
ENVIRONMENTS ?= infra/environments.json
# APPROVAL is cdk deploy's --require-approval: CDK's default, broadening, asks on a terminal
# before a deployment widens IAM or security groups (and fails where there is no terminal). With
# CI set (as CI services set it), never: a pipeline has no stdin, and reviews make diff instead.
APPROVAL ?= $(if $(CI),never,broadening)
CDK_APP_CONTEXT = -c atf:registry=$(REGISTRY) -c atf:environments=$(ENVIRONMENTS)

cdk-cli: ## install the pinned CDK CLI into .tools/ (once)
	@[ "$$($(CDK) --version 2>/dev/null | cut -d' ' -f1)" = "$(CDK_VERSION)" ] || \
	  npm install --prefix $(TOOLS) --no-audit --no-fund --loglevel=error --save-exact aws-cdk@$(CDK_VERSION)

cfn-lint-cli: ## install the pinned cfn-lint into .tools/venv (once)
	@[ "$$($(CFN_LINT) --version 2>/dev/null)" = "cfn-lint $(CFN_LINT_VERSION)" ] || \
	  { python3 -m venv $(TOOLS)/venv && $(TOOLS)/venv/bin/pip install -q --disable-pip-version-check cfn-lint==$(CFN_LINT_VERSION); }

# CDK_OUT: where make synth writes the templates [cdk.out].
CDK_OUT ?= cdk.out
synth: build cdk-cli ## every stack of every environment into cdk.out/, offline (cdk-nag errors fail it): make synth [REGISTRY=lambdas.json]
	@rm -rf $(CDK_OUT)
	$(CDK) synth --quiet -o $(CDK_OUT) $(CDK_APP_CONTEXT) $(SYNTH_FLAGS) 2>&1 | grep -v '^!!'; exit $${PIPESTATUS[0]}
	@ls $(CDK_OUT)/*.template.json | wc -l | xargs echo "templates:"

diff: build cdk-cli ## compare environment ENV (or its team TEAM's stacks) with what is deployed: make diff ENV=staging [TEAM=mail] (AWS credentials)
	$(CDK) diff $(CDK_APP_CONTEXT) -c env=$(ENV) $(if $(TEAM),-c team=$(TEAM)) --all

# make deploy ENV=dev: every stack of the environment, the core first (each lambda stack depends on
# it). make deploy ENV=dev TEAM=mail: that team's stacks alone (the app builds only them, and
# --exclusively keeps the CLI from deploying anything they depend on).
deploy: build cdk-cli ## deploy environment ENV, or only team TEAM's stacks: make deploy ENV=dev [TEAM=mail] [APPROVAL=never] (make doctor first; no prompt if CI is set)
	@$(MAKE) --no-print-directory doctor
	$(CDK) deploy $(CDK_APP_CONTEXT) -c env=$(ENV) $(if $(TEAM),-c team=$(TEAM) --exclusively) --all --require-approval $(APPROVAL)

# make doctor ENV=dev: the account and region that ENV deploys to, checked before anything is
# created there (infra/doctor): credentials, Lambda concurrency, CDK bootstrap, Docker if the
# registry has ecs lambdas, and who the alarms reach; each failure says what to do.
.PHONY: doctor
doctor: ## check the AWS account for environment ENV before a deploy: make doctor ENV=dev (AWS credentials)
	@$(GO) -C infra build -o $(abspath $(BIN))/atf-doctor ./doctor
	$(BIN)/atf-doctor -env $(ENV) -environments $(ENVIRONMENTS) -registry $(REGISTRY)

# make destroy ENV=dev STACK=mail: delete the stack atf-dev-mail of lambdas no longer in the
# registry (a removed team's stack is named after the team unless its lambdas named a "stack").
# CDK deletes only what the app has, and the app builds the registry's stacks: with -c destroy the
# app has just that stack, empty, and refuses a stack still in the registry.
destroy: cdk-cli ## delete a lambda stack removed from the registry: make destroy ENV=dev STACK=<team or stack> (AWS credentials)
	@[ -n "$(STACK)" ] || { echo "usage: make destroy ENV=dev STACK=<the removed team's name, or its stack's>"; exit 2; }
	$(CDK) destroy $(CDK_APP_CONTEXT) -c env=$(ENV) -c destroy=$(STACK) --force atf-$(ENV)-$(STACK)

# make deploy-local: cdk bootstrap and cdk deploy of ENV into moto (CloudFormation, in memory, on
# ATF_DEPLOY_MOTO_PORT, 5100, not the emulators' port), its outputs printed, then every resource of
# its template checked through the AWS API (cmd/deploycheck); moto is stopped after, even on
# failure. Without Docker the ecs lambdas' executors are left out (cdk -c ecs=false). What moto
# does not apply is listed as it runs, and in localstack/README.md. Not part of make test.
.PHONY: deploy-local
deploy-local: build cdk-cli ## cdk deploy ENV [dev] into moto (no Docker, no AWS account) and check every resource it created
	localstack/deploy-local run $(ENV)

# make e2e-deployed: end to end on what was deployed (functions/deployed_test.go): the dev stacks
# (the core and each lambda stack) deployed into moto (localstack/deploy-local, on ATF_DEPLOY_MOTO_PORT [5100]), its names, function
# environments, event source mappings and rule read back through the AWS API, and the function
# binaries run under the Lambda Runtime API harness as they wire them, through the core scenarios.
# About 80 s once make build and the tools are in place; make test runs it too. Moto is stopped
# after, even on failure.
.PHONY: e2e-deployed
e2e-deployed: build cdk-cli ## deploy the dev stacks (core and lambda stacks) into moto and run the function binaries as they wire them, through the core scenarios
	@trap 'localstack/deploy-local stop' EXIT; \
	ATF_DEPLOYED_TESTS=require $(GO) test -count=1 -run '^TestDeployedStack$$' -v ./functions/

# make infra-test: the registry's tests, the template assertions (infra/stack, the 300-lambda
# scale tests among them), make synth of lambdas.json and cfn-lint of its templates, then the
# generated registry of 300 lambdas in 30 teams (infra/scale) synthesized for prod alone and
# linted: its 31 templates are what the scale tests assert on, and linting every environment's
# would triple the time for nothing more.
SCALE_DIR := $(BIN)/scale
infra-test: cfn-lint-cli ## the infra checks: registry, template assertions and cdk-nag (300 lambdas included), cfn-lint of make synth
	$(GO) test -count=1 ./shared/registry/
	cd infra && $(GO) vet ./... && $(GO) test -count=1 -timeout 60m ./...
	@$(MAKE) --no-print-directory synth
	@# W3005 (a DependsOn that a reference implies) is CDK's own: a function depends on its role.
	$(CFN_LINT) --ignore-checks W3005 -- cdk.out/*.template.json
	@echo "infra-test: registry, template assertions, cdk-nag (lambdas.json, and 300 lambdas) and cfn-lint (lambdas.json) passed"

# cfn-lint of 31 stacks takes about 8 minutes on 2 cores: its own target, out of make test.
infra-scale: cfn-lint-cli ## cfn-lint of every stack of a generated registry of 300 lambdas in 30 teams (minutes)
	$(GO) -C infra run ./scale/gen $(CURDIR)/$(SCALE_DIR)
	@$(MAKE) --no-print-directory synth REGISTRY=$(SCALE_DIR)/lambdas.json ENVIRONMENTS=$(SCALE_DIR)/environments.json CDK_OUT=$(SCALE_DIR)/cdk.out SYNTH_FLAGS='-c env=prod'
	@# Two processes of 8 templates each: one cfn-lint of the 31 takes minutes on one core.
	ls $(SCALE_DIR)/cdk.out/*.template.json | xargs -P 2 -n 8 $(CFN_LINT) --ignore-checks W3005 --
	@echo "infra-scale: cfn-lint of 300 lambdas' stacks passed"

tidy: ## go mod tidy
	$(GO) mod tidy

clean: ## remove build output, synthesized templates and the local database
	rm -rf $(BIN) .atf cdk.out .schemathesis
