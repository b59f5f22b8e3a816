# `make deb` builds dist/turnhost_<version>-<revision>_<arch>.deb (docs/packaging.md).
# Included by the top Makefile; also works alone: make -f packaging/deb.mk deb
# TURNHOST_DEB_NATIVE=rebuild compiles the native modules instead of reusing the checkout's.
PACKAGING_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))

.PHONY: deb
deb:
	bash $(PACKAGING_DIR)/build-deb.sh
