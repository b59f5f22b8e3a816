# turnhost build entry points. `make test` is the README's test command and what CI runs.
SHELL := /bin/bash
NODE ?= node


.PHONY: all deps build build-ts build-native lint format test test-unit run clean

include packaging/deb.mk
include test/vm/vm.mk

all: build

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

# System packages (apt, idempotent) then npm packages.
deps:
	bash scripts/install-deps.sh
	$(MAKE) node_modules/.package-lock.json

build: deps build-ts build-native

build-ts:
	npx tsc -p tsconfig.json

build-native:
	$(MAKE) -C identity-helper all asan
	$(MAKE) -C test/native

# Lint: typescript-eslint (type-aware), the layering and cycle check, prettier, clang-format.
C_SOURCES := $(wildcard identity-helper/src/*.[ch] identity-helper/fuzz/*.c test/native/*.c)
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

# Lint first; the tests are type-checked (tap runs them through tsx, which does not), the
# helper's descriptor parser is fuzzed for a bounded time, then every tap suite runs.
# The deb is built first so the packaging tests reuse it instead of building under test load;
# if it fails, those tests rebuild it and report why.
test: build lint
	npx tsc -p tsconfig.test.json
	$(MAKE) -C identity-helper fuzz-run FUZZ_SECONDS=30
	$(MAKE) deb || echo "make deb failed: the packaging tests will rebuild it and report why"
	npx tap

# Development supervisor as root: dev config + root-owned helper config, then serve.
run: build
	$(NODE) dist/supervisor/dev-setup.js .turnhost-dev
	$(NODE) dist/supervisor/cli/main.js serve --config .turnhost-dev/turnhost.json

clean:
	rm -rf dist .tap
	$(MAKE) -C identity-helper clean
	$(MAKE) -C test/native clean
