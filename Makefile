# nfsrdma — build and test.
#   make test    unit tests with -race, then the integration suite in the test-bed guest
#   make check   unit tests only: needs neither qemu nor root once the cgo
#                headers (libibverbs-dev, librdmacm-dev) are there
#   make soak    the fault suite with the 10-minute chaos soak (SOAK=10m);
#                its table goes to results/faults.md
#   make demo    the main job: mount knfsd's export over RDMA in the bed and use it
#   make build   _build/nfsrdma-mount (make builds it too)
#   make install install what make built: nfsrdma-mount, its mount(8) helper
#                links and man page (PREFIX=/usr/local, SBINDIR=/sbin,
#                DESTDIR honoured); it never builds, so that
#                "make && sudo make install" needs no Go in root's PATH
GO      ?= go
BUILD   := _build
TESTBED := $(BUILD)/testbed
GUEST_TIMEOUT ?= 50m
# The suite times out first, so that a hang ends with its goroutines.
SUITE_TIMEOUT ?= 40m

.PHONY: all build deps cgo-deps check test integration soak bench bench-baseline demo shell install uninstall clean FORCE

all: build check

build: $(BUILD)/nfsrdma-mount

# Host packages of the test bed: qemu and debootstrap for the guest, the
# rdma-core headers for cgo (root installs them with apt).
deps:
	$(GO) run ./integration/cmd/testbed host-deps

# The unit tests need only what cgo compiles against: rdma-core's headers.
# They are installed with apt when missing (as root); nothing else is.
CGO_HEADERS  := /usr/include/infiniband/verbs.h /usr/include/rdma/rdma_cma.h
CGO_PACKAGES := libibverbs-dev librdmacm-dev
cgo-deps:
	@missing=; for h in $(CGO_HEADERS); do [ -e "$$h" ] || missing=yes; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "cgo needs the rdma-core headers: apt-get install $(CGO_PACKAGES) (as root)" >&2; exit 1; \
		fi; \
		command -v apt-get >/dev/null || { echo "cgo needs the rdma-core headers ($(CGO_HEADERS)): install rdma-core's development packages" >&2; exit 1; }; \
		echo "installing $(CGO_PACKAGES)"; \
		apt-get update -q >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(CGO_PACKAGES) >/dev/null; \
	fi

check: cgo-deps
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

$(TESTBED): FORCE
	$(GO) build -o $@ ./integration/cmd/testbed

$(BUILD)/integration.test: FORCE
	$(GO) test -c -tags integration -o $@ ./integration

# The version --version prints: the tag or commit, as git describes it.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
MOUNT_LDFLAGS := $(if $(VERSION),-X main.version=$(VERSION))

$(BUILD)/nfsrdma-mount: FORCE
	$(GO) build -ldflags '$(MOUNT_LDFLAGS)' -o $@ ./cmd/nfsrdma-mount

# The integration suite: one guest boot, host-built binaries over 9p.
integration: deps $(TESTBED) $(BUILD)/integration.test $(BUILD)/nfsrdma-mount
	$(TESTBED) build
	$(TESTBED) run -timeout $(GUEST_TIMEOUT) -env NFSRDMA_MOUNT=/share/$(BUILD)/nfsrdma-mount -- \
		./$(BUILD)/integration.test -test.v -test.count=1 -test.timeout $(SUITE_TIMEOUT)

test: check integration

# The fault suite alone (integration's TestFaults*) with the long chaos
# soak; the guest writes its table to $(BUILD)/faults.md (the repository is
# /share in the guest), copied to results/faults.md when the run passes.
SOAK ?= 10m
soak: deps $(TESTBED) $(BUILD)/integration.test $(BUILD)/nfsrdma-mount
	$(TESTBED) build
	rm -f $(BUILD)/faults.md
	$(TESTBED) run -timeout $(GUEST_TIMEOUT) -env NFSRDMA_MOUNT=/share/$(BUILD)/nfsrdma-mount -env NFSRDMA_SOAK=$(SOAK) -- \
		./$(BUILD)/integration.test -test.v -test.count=1 -test.timeout $(SUITE_TIMEOUT) -test.run '^TestFaults'
	cp $(BUILD)/faults.md results/faults.md

bench: deps $(TESTBED)
	$(TESTBED) bench

bench-baseline: deps $(TESTBED)
	$(TESTBED) bench-baseline

demo: deps $(TESTBED)
	$(TESTBED) demo

shell: deps $(TESTBED)
	$(TESTBED) shell

# make install: the binary in $(PREFIX)/bin, mount(8)'s helper names
# (mount.nfsrdma for -t nfsrdma, mount.fuse.nfsrdma for the fuse.nfsrdma type
# /proc/mounts shows; umount.* clean up a dead mount) in $(SBINDIR), the man
# page in $(PREFIX)/share/man/man8. DESTDIR prefixes every path (packaging).
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
SBINDIR ?= /sbin
MANDIR  ?= $(PREFIX)/share/man
HELPERS := mount.nfsrdma mount.fuse.nfsrdma umount.nfsrdma umount.fuse.nfsrdma

#
# The installed binary gets cap_net_bind_service (setcap, from libcap2-bin)
# when it can, as mount.nfs is set-user-ID root: a user's mount of an
# export with exports(5)'s default "secure" then sends MOUNT (and NFS over
# TCP) from a reserved port. The capability lets it bind ports below 1024
# and nothing else. With DESTDIR (a package) the package sets it; SETCAP=
# (empty) skips it.
SETCAP ?= $(shell command -v setcap 2>/dev/null || ls /sbin/setcap /usr/sbin/setcap 2>/dev/null | head -n1)

# install does not build: under sudo, Go is usually not in PATH, and a build
# as root would leave a root-owned $(BUILD) behind.
install:
	@[ -f $(BUILD)/nfsrdma-mount ] || { echo "$(BUILD)/nfsrdma-mount is not built: run make first as yourself (make build), then sudo make install" >&2; exit 1; }
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(MANDIR)/man8
	install -m 0755 $(BUILD)/nfsrdma-mount $(DESTDIR)$(BINDIR)/nfsrdma-mount
	for h in $(HELPERS); do ln -sf $(BINDIR)/nfsrdma-mount $(DESTDIR)$(SBINDIR)/$$h; done
	install -m 0644 doc/nfsrdma-mount.8 $(DESTDIR)$(MANDIR)/man8/nfsrdma-mount.8
	@if [ -n "$(DESTDIR)" ]; then \
		echo "DESTDIR set: the package should run: setcap cap_net_bind_service+ep $(BINDIR)/nfsrdma-mount"; \
	elif [ -z "$(SETCAP)" ]; then \
		echo "warning: no setcap (apt-get install libcap2-bin): users' mounts of 'secure' exports will be refused; then run: setcap cap_net_bind_service+ep $(BINDIR)/nfsrdma-mount" >&2; \
	elif $(SETCAP) cap_net_bind_service+ep $(BINDIR)/nfsrdma-mount; then \
		echo "$(BINDIR)/nfsrdma-mount: cap_net_bind_service (users' mounts bind reserved ports)"; \
	else \
		echo "warning: setcap failed (a file system without extended attributes, or not root): users' mounts of 'secure' exports will be refused" >&2; \
	fi

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/nfsrdma-mount $(DESTDIR)$(MANDIR)/man8/nfsrdma-mount.8
	for h in $(HELPERS); do rm -f $(DESTDIR)$(SBINDIR)/$$h; done

clean:
	rm -rf $(BUILD)

# Mutation testing: each listed deliberate break of a rule must make its
# tests fail (scripts/mutations.txt; MUTATE_ONLY=regexp selects ids).
.PHONY: mutate
mutate:
	scripts/mutate.sh scripts/mutations.txt
