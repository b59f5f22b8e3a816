# turnhost build entry points. `make test` is the README's test command and what CI runs.
SHELL := /bin/bash
NODE ?= node


.PHONY: all deps build build-ts build-native test run clean

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

# The tests are type-checked (tap runs them through tsx, which does not), the helper's descriptor
# parser is fuzzed for a bounded time, then every tap suite runs.
# The deb is built first so the packaging tests reuse it instead of building under test load;
# if it fails, those tests rebuild it and report why.
test: build
	npx tsc -p tsconfig.test.json
	$(MAKE) -C identity-helper fuzz-run FUZZ_SECONDS=30
	$(MAKE) deb || echo "make deb failed: the packaging tests will rebuild it and report why"
	npx tap

# Development supervisor as root: dev config + root-owned helper config, then serve.
run: build
	$(NODE) dist/supervisor/dev-setup.js .turnhost-dev
	$(NODE) dist/supervisor/cli.js serve --config .turnhost-dev/turnhost.json

clean:
	rm -rf dist .tap
	$(MAKE) -C identity-helper clean
	$(MAKE) -C test/native clean
