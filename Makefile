# sqs-claim: every command a user or CI needs. `make help` lists them.
#
# The two commands that set everything up on a fresh machine:
#   make demo   - builds the example app and runs its consumer on a sample event (embedded store)
#   make test   - starts the stand-ins (DynamoDB Local, ministack; Redis and PostgreSQL checked)
#                 and runs the whole test suite against them

SHELL := /bin/bash
CARGO ?= cargo
EVENT ?= events/plain.json
STORE ?=
# The stand-ins' env file: in SQS_CLAIM_RUN when set, as scripts/standins.sh writes it there.
STANDINS_ENV := $(or $(SQS_CLAIM_RUN),$(CURDIR)/.standins)/env
APP := $(or $(CARGO_TARGET_DIR),target)/debug/payments
# The `payments` binary with only what the run needs: the command line and the embedded stores,
# plus Redis or PostgreSQL when STORE names one (issue 37: `make demo` builds no CLI crate, no
# Redis, no PostgreSQL).
comma := ,
# The store the binary will open: STORE, else the environment's SQS_CLAIM_STORE (lower-cased:
# URL schemes are case-insensitive).
STORE_URL = $(shell printf '%s' '$(or $(STORE),$(SQS_CLAIM_STORE))' | tr A-Z a-z)
APP_FEATURES = cli$(if $(findstring redis,$(STORE_URL)),$(comma)redis)$(if $(findstring postgres,$(STORE_URL)),$(comma)postgres)
# make chaos: seconds of chaos per store (the control run lasts a sixth of it, at least 5 s).
CHAOS_SECS ?= 120
CHAOS_CONTROL_SECS ?=
# make deploy ARCHITECTURE=x86_64: template.yaml's Architecture given to sam build and sam deploy alike
# (unset: the template's default, arm64). A built bootstrap must match the deployed Architectures.
ARCHITECTURE ?=
ARCH_OVERRIDE = $(if $(ARCHITECTURE),--parameter-overrides Architecture=$(ARCHITECTURE))

.PHONY: help build cli demo invoke balances test test-unit chaos chaos-short lint fmt clippy cfn-lint \
        doc-features bench bench-quick measure-deployed measure-profiles profile-consumer bench-kafka kafka-fixtures check-model check-model-stores watch standins-up standins-down services deploy deploy-local clean-state fuzz fuzz-check \
        sam-build smoke-bootstrap check-docs

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-14s %s\n", $$1, $$2}'

build: ## Build the library, the operator CLI (sqs-claim), the example app (payments) and the Lambda binary
	$(CARGO) build --workspace --all-features --bins

cli: ## Build the operator's sqs-claim (target/debug/sqs-claim); install it with: cargo install --path cli
	$(CARGO) build -p sqs-claim-cli --bin sqs-claim

demo: ## Run the example consumer on events/plain.json with the embedded store (run it again: all duplicates)
	$(CARGO) build -p payments --features $(APP_FEATURES) --bin payments
	$(APP) invoke $(EVENT) $(if $(STORE),--store '$(STORE)')
	$(APP) balances $(if $(STORE),--store '$(STORE)')

invoke: ## Run the example consumer on EVENT=events/....json [STORE=url]
	$(CARGO) build -p payments --features $(APP_FEATURES) --bin payments
	$(APP) invoke $(EVENT) $(if $(STORE),--store '$(STORE)')

balances: ## Print account balances [STORE=url]
	$(CARGO) build -p payments --features $(APP_FEATURES) --bin payments
	$(APP) balances $(if $(STORE),--store '$(STORE)')

clean-state: ## Forget the embedded store (.sqs-claim/)
	rm -rf .sqs-claim

standins-up: ## Start DynamoDB Local and ministack on 127.0.0.1 (installs them on first use)
	scripts/standins.sh up

standins-down: ## Stop DynamoDB Local and ministack (by PID)
	scripts/standins.sh down

services: ## Check Redis (6379) and PostgreSQL (5432) answer; start them if not
	scripts/services.sh check

test: standins-up services ## Run the whole test suite against the real servers
	set -a && . "$(STANDINS_ENV)" && set +a && $(CARGO) test --workspace --all-features --no-fail-fast

check-model: ## Model-check the claim protocol exhaustively (model/: every interleaving for small bounds, and every mutant caught)
	$(CARGO) test -p sqs-claim-model --test exhaustive -- --nocapture --test-threads 2

check-model-stores: standins-up services ## The model-based test: every real store answers as the model's store (tests/suite/test_model.rs)
	set -a && . "$(STANDINS_ENV)" && set +a && $(CARGO) test -p sqs-claim --all-features --test suite test_model:: -- --nocapture

test-unit: ## Tests that need no server (processor, FIFO, memory store, events, publisher, the CLIs' parsers, the test kit)
	$(CARGO) test -p sqs-claim --all-features --lib
	$(CARGO) test -p sqs-claim --all-features --test suite -- test_processor:: test_fifo_processing:: \
		test_memory_store:: test_events:: test_publish:: test_deadline:: test_properties:: \
		test_fault_proxy:: test_lambda_run:: test_lease:: test_idempotency::
	$(CARGO) test -p payments --all-features --lib --bins
	$(CARGO) test -p payments --all-features --test suite -- test_properties::
	$(CARGO) test -p sqs-claim-cli --all-features --lib --bins
	$(CARGO) test -p sqs-claim-testkit --all-features -- --skip conflict::tests::dynamodb_local   # those need DynamoDB Local

chaos: standins-up services ## Kills, stalls, store faults on every store; then every credit exactly once [CHAOS_SECS= CHAOS_STORES= CHAOS_SEED=]
	set -a && . "$(STANDINS_ENV)" && set +a && SQS_CLAIM_CHAOS=1 CHAOS_SECS=$(CHAOS_SECS) \
		CHAOS_CONTROL_SECS=$(CHAOS_CONTROL_SECS) $(CARGO) test -p payments --all-features --test chaos

chaos-short: ## The short chaos pass CI runs (15 s per store, 5 s control)
	$(MAKE) chaos CHAOS_SECS=15 CHAOS_CONTROL_SECS=5

fmt: ## Format
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings

cfn-lint:
	"$$(scripts/pytool.sh cfn-lint)" template.yaml

lint: clippy cfn-lint ## cargo fmt --check, clippy -D warnings, rustdoc -D warnings, cfn-lint, sample events and the public API lists (api/) up to date, the default build's face at most 400 items, doc blocks marked
	$(CARGO) fmt --all -- --check
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --all-features --no-deps --quiet
	python3 scripts/gen-events.py --check
	python3 scripts/public-items.py --check
	python3 scripts/public-items.py --default-features --max 400 sqs-claim   # the face of the default build (issue 37)
	python3 scripts/check-docs.py --list >/dev/null

doc-features: ## Compile each doc page's Rust blocks with only the features the page names (scripts/check-doc-features.py)
	python3 scripts/check-doc-features.py

# cargo-fuzz needs nightly-only compiler flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain
# accept them. No sanitizer (-s none): ASan needs its runtime rebuilt, and the crate has no
# unsafe code; libFuzzer still stops at the first panic and saves the input under
# fuzz/artifacts/TARGET/. Corpora grow in fuzz/corpus/ (not committed), seeded from fuzz/seeds/.
FUZZ_TARGETS := event_decode key_extract payment_parse
FUZZ_TIME ?= 60

fuzz: ## Run each cargo-fuzz target in fuzz/ for FUZZ_TIME seconds (default 60; installs cargo-fuzz)
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	for t in $(FUZZ_TARGETS); do \
		mkdir -p fuzz/corpus/$$t && \
		RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run -s none --release $$t fuzz/corpus/$$t fuzz/seeds/$$t \
			-- -dict=fuzz/json.dict -max_total_time=$(FUZZ_TIME) || exit 1; \
	done

fuzz-check: ## Type-check the fuzz targets on the stable toolchain (no cargo-fuzz needed)
	$(CARGO) check --manifest-path fuzz/Cargo.toml --bins

# make bench: the in-process overhead (benches/processor.rs), then sqs-claim, Powertools-Python,
# Powertools-TypeScript and a bare SDK loop side by side on DynamoDB Local with 0 and 100 ms per
# round trip (scripts/bench/; Powertools is installed into .bench/ on first use). About 11 min.
# BENCH_ARGS passes compare.py flags, e.g. BENCH_ARGS="--impls sqs-claim,sqs-claim@100,powertools-ts".
bench: standins-up ## Side-by-side benchmark vs Powertools and a bare SDK loop, N = 10, 100, 1000 (ratios; .bench/results.md)
	set -a && . "$(STANDINS_ENV)" && set +a && CARGO="$(CARGO)" scripts/bench/run.sh $(BENCH_ARGS)

bench-quick: standins-up ## The same with N = 10, 100 only (about 3 min)
	set -a && . "$(STANDINS_ENV)" && set +a && CARGO="$(CARGO)" scripts/bench/run.sh --quick $(BENCH_ARGS)

measure-deployed: standins-up ## Peak RSS (N = 1000) and init of the consumer cargo-lambda builds for template.yaml (x86_64; arm64 sized), beside cargo build's, in one run
	scripts/measure-deployed.sh

measure-profiles: standins-up ## fat/1 thin/1 thin/16 (LTO/codegen units): cold build, rebuild after a change, size, RSS, init, in one run (VARIANTS=...; about an hour)
	scripts/measure-profiles.sh $(VARIANTS)

profile-consumer: standins-up ## CPU per message of a warm batch of 1000 under a 1,024 MB Lambda's CPU quota, and where it goes (callgrind, by crate)
	$(CARGO) build --release -p payments --features cli,rss-floor --bins
	scripts/profile-consumer.py

bench-kafka: ## Kafka values decoded from Avro and Protobuf against the JSON path, N = 1000 (a ratio in one run; no server)
	$(CARGO) bench -p sqs-claim --no-default-features --features kafka-avro,kafka-protobuf --bench kafka_decode

kafka-fixtures: ## Rewrite events/streams/kafka-avro.json and kafka-protobuf.json with the producers' own libraries (a venv of its own)
	"$$(scripts/pytool.sh --lib kafka-fixtures avro==1.12.1 protobuf==7.36.2 grpcio-tools==1.85.4 fastavro==1.13.1 "confluent-kafka[avro,protobuf,schemaregistry]==2.16.2")" scripts/kafka-fixtures.py

watch: ## cargo lambda watch on the embedded store (then: cargo lambda invoke consumer -A 127.0.0.1 --data-file events/plain.json)
	PATH="$$(dirname "$$(scripts/pytool.sh cargo-lambda)"):$$PATH" cargo lambda watch -A 127.0.0.1 --bin consumer

# make deploy-local: template.yaml deployed onto the stand-ins' ministack as a CloudFormation stack
# (its parameters' defaults; SQS_CLAIM_DEPLOY_PARAMS="Key=Value ..." overrides), fed payments with
# duplicates and a body that does not parse, checked (balances, the DLQ and its reason), deleted;
# then examples/streams/template.yaml (the stream-consumer on Kinesis and DynamoDB Streams; each
# record credited once), unless SQS_CLAIM_DEPLOY_STREAMS=off.
# SQS_CLAIM_DEPLOY_ENDPOINT=http://127.0.0.1:PORT uses another ministack (docs/deploy.md).
deploy-local: ## Deploy template.yaml and the streams template onto ministack (no AWS account), feed them, check, delete them
	CARGO="$(CARGO)" scripts/deploy-local.sh

deploy: ## Build with cargo-lambda through SAM and deploy (asks questions the first time; ARCHITECTURE=x86_64 for Intel; docs/deploy.md)
	scripts/sam.sh build $(ARCH_OVERRIDE)
	scripts/sam.sh deploy --guided $(ARCH_OVERRIDE)

# make sam-build: what `make deploy` builds, checked without an AWS account or Docker (CI runs it
# near its end: arm64 and x86_64, each about 10 to 15 min cold and 200 s after a change; docs/deploy.md). SAM_TEMPLATES lists the
# templates; SQS_CLAIM_SAM_TARGET_DIR moves its cargo target dir (~/.cache/sqs-claim/target-sam).
SAM_TEMPLATES ?= template.yaml examples/streams/template.yaml
sam-build: ## sam validate --lint + sam build of the templates (template.yaml for arm64 and x86_64); each bootstrap checked for its architecture
	scripts/check-sam-build.sh $(SAM_TEMPLATES)

# make smoke-bootstrap: the bootstraps `make sam-build` kept for template.yaml (arm64 and x86_64),
# each run on one event against DynamoDB Local under a fake Runtime API; arm64 under qemu-user.
SAM_ARTIFACTS = $(or $(SQS_CLAIM_SAM_TARGET_DIR),$(or $(SQS_CLAIM_CACHE),$(HOME)/.cache/sqs-claim)/target-sam)/sam-artifacts/template
smoke-bootstrap: standins-up ## Run template.yaml's built bootstraps (make sam-build first) on one event against DynamoDB Local; arm64 under qemu-user
	@ls $(SAM_ARTIFACTS)/*/ConsumerFunction/bootstrap >/dev/null 2>&1 || { echo "no bootstraps under $(SAM_ARTIFACTS): run make sam-build first" >&2; exit 1; }
	scripts/smoke-bootstrap.py $(SAM_ARTIFACTS)/*/ConsumerFunction/bootstrap

# make check-docs: every ```console block and every sh block marked `check-docs: run` of README.md,
# cli/README.md, events/README.md and docs/*.md, run on a fresh copy of the tree (scripts/check-docs.py).
check-docs: ## Run the documentation's command blocks and compare their output (scripts/check-docs.py)
	$(CARGO) build -p payments --all-features --bin payments
	python3 scripts/check-docs.py
