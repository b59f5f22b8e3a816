# turnhost build entry points. `make test` is the README's test command and what CI runs.
SHELL := /bin/bash
NODE ?= node


.PHONY: all deps build build-ts build-native test run clean

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
	$(MAKE) -C identity-helper
	$(MAKE) -C test/native

test: build
	npx tap

run: build
	$(NODE) dist/supervisor/cli.js serve --data-dir .turnhost-dev

clean:
	rm -rf dist .tap
	$(MAKE) -C identity-helper clean
	$(MAKE) -C test/native clean
