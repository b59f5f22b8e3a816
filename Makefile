# turnhost build entry points. `make run` and `make test` are the README's two commands; CI runs
# `make test` (with the VM tiers after it, .ci/run).
SHELL := /bin/bash
NODE ?= node
# Runs one step of `make test` and prints `make test: STEP took N s` (scripts/step.sh).
STEP := bash scripts/step.sh

.PHONY: all deps deps-test build build-ts build-native build-test-native client-pack lint format test test-unit run clean

include packaging/deb.mk
include test/vm/vm.mk

all: build

node_modules/.package-lock.json: package.json package-lock.json
	bash scripts/npm-ci.sh

# System packages (apt, idempotent) then npm packages. `deps` is what building and running the
# server needs; `deps-test` adds the test toolchain (scripts/install-deps.sh names both sets).
deps:
	bash scripts/install-deps.sh runtime
	$(MAKE) node_modules/.package-lock.json

deps-test:
	bash scripts/install-deps.sh test
	$(MAKE) node_modules/.package-lock.json

# What running needs: the compiled TypeScript, the hardened identity helper and the turn worker
# (gcc only).
build: deps build-ts build-native

build-ts:
	npx tsc -p tsconfig.json

build-native:
	$(MAKE) -C identity-helper all
	$(MAKE) -C worker all
	$(MAKE) -C attack all

# The typed client as its own package, @turnhost/client (docs/client.md): compiled alone, staged
# in dist/client-package/ with the schema types written out (scripts/client-package.ts), packed
# to dist/turnhost-client-VERSION.tgz. Its one dependency is ws.
client-pack: node_modules/.package-lock.json
	rm -rf dist/client-package
	npx tsc -p client/tsconfig.json
	npx tsx scripts/client-package.ts
	cd dist/client-package && npm pack --silent --pack-destination ..

# What only the tests run: the helper's and the worker's ASan+UBSan builds and the native test probes.
build-test-native:
	$(MAKE) -C identity-helper asan
	$(MAKE) -C worker asan
	$(MAKE) -C attack asan
	$(MAKE) -C test/native

# Lint: typescript-eslint (type-aware), the layering and cycle check, prettier, clang-format.
C_SOURCES := $(wildcard identity-helper/src/*.[ch] identity-helper/fuzz/*.c worker/src/*.[ch] \
                         worker/fuzz/*.c test/native/*.c attack/src/*.[ch])
lint: node_modules/.package-lock.json
	npm run --silent lint
	npm run --silent format:check
	clang-format --dry-run --Werror $(C_SOURCES)

format: node_modules/.package-lock.json
	npm run --silent format
	clang-format -i $(C_SOURCES)

# Unit tests only: no root, no native build, no namespaces (CONTRIBUTING.md).
test-unit: node_modules/.package-lock.json
	npx tsc -p tsconfig.test.json
	npx tap test/unit

# The test packages, the build, then lint; the tests are type-checked (tap runs them through
# tsx, which does not), the helper's descriptor parser and the worker's protocol parser are fuzzed for a bounded time, then every
# tap suite runs. The deb is built first so the packaging tests reuse it instead of building
# under test load; if it fails, those tests rebuild it and report why. Each step prints its time.
test:
	$(STEP) deps $(MAKE) --no-print-directory deps-test
	$(STEP) build $(MAKE) --no-print-directory build build-test-native
	$(STEP) lint $(MAKE) --no-print-directory lint
	$(STEP) tsc-tests npx tsc -p tsconfig.test.json
	$(STEP) fuzz $(MAKE) -C identity-helper fuzz-run FUZZ_SECONDS=30
	$(STEP) fuzz-worker $(MAKE) -C worker fuzz-run FUZZ_SECONDS=30
	$(STEP) deb $(MAKE) --no-print-directory deb || echo "make deb failed: the packaging tests will rebuild it and report why"
	$(STEP) tap npx tap

# Development supervisor as root: dev config + root-owned helper config, then serve. Needs only
# the runtime packages: no test toolchain is installed or built.
run: build
	$(NODE) dist/supervisor/dev-setup.js .turnhost-dev
	$(NODE) dist/supervisor/cli/main.js serve --config .turnhost-dev/turnhost.json

clean:
	rm -rf dist .tap
	$(MAKE) -C identity-helper clean
	$(MAKE) -C worker clean
	$(MAKE) -C attack clean
	$(MAKE) -C test/native clean
