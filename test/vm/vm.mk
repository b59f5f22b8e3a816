# The VM tier (test/vm/, docs/vm-tier.md). Included from the top Makefile:
#   vm-test      build the checkout, build or reuse the guest image, boot it, run test/vm/guest/*.test.mjs
#   vm-deb-test  build the deb (unless TURNHOST_DEB names one), install it in the guest with dpkg,
#                run test/vm/guest/deb.test.mjs
#   vm-hosting-test  the hosting template (packaging/hosting/cloud-init.yaml) with Debian's
#                cloud-init and a NoCloud seed: the built deb, three boots (fresh, one variable
#                changed, a failing check), a turn through the API from the host
#   vm-image     only build (or reuse) the cached guest image
#   vm-clean     remove the cached image and the last runs (serial log, journal)
.PHONY: vm-test vm-deb-test vm-hosting-test vm-image vm-clean

vm-test: build-ts build-native
	bash test/vm/run.sh

vm-deb-test: $(if $(TURNHOST_DEB),,deb)
	bash test/vm/run-deb.sh

vm-hosting-test: $(if $(TURNHOST_DEB),,deb)
	bash test/vm/run-hosting.sh

vm-image:
	bash test/vm/build-image.sh

vm-clean:
	for root in test/vm/.cache/run*/root; do if mountpoint -q "$$root"; then umount "$$root"; fi; done
	rm -rf test/vm/.cache
