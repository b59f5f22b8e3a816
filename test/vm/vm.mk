# The VM tier (test/vm/, docs/vm-tier.md). Included from the top Makefile:
#   vm-test   build the checkout, build or reuse the guest image, boot it, run test/vm/guest/*.test.mjs
#   vm-image  only build (or reuse) the cached guest image
#   vm-clean  remove the cached image and the last run (serial log, journal)
.PHONY: vm-test vm-image vm-clean

vm-test: build-ts build-native
	bash test/vm/run.sh

vm-image:
	bash test/vm/build-image.sh

vm-clean:
	if mountpoint -q test/vm/.cache/run/root; then umount test/vm/.cache/run/root; fi
	rm -rf test/vm/.cache
