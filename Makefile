# nfsrdma — build and test.
#   make test    unit tests with -race, then the integration suite in the test-bed guest
#   make check   unit tests only
#   make demo    the main job: mount knfsd's export over RDMA in the bed and use it
GO      ?= go
BUILD   := _build
TESTBED := $(BUILD)/testbed
GUEST_TIMEOUT ?= 50m
# The suite times out first, so that a hang ends with its goroutines.
SUITE_TIMEOUT ?= 40m

.PHONY: all deps check test integration bench bench-baseline demo shell clean FORCE

all: check

# Host packages: qemu and debootstrap for the bed, rdma-core headers for cgo.
deps:
	$(GO) run ./integration/cmd/testbed host-deps

check: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

$(TESTBED): FORCE
	$(GO) build -o $@ ./integration/cmd/testbed

$(BUILD)/integration.test: FORCE
	$(GO) test -c -tags integration -o $@ ./integration

$(BUILD)/nfsrdma-mount: FORCE
	$(GO) build -o $@ ./cmd/nfsrdma-mount

# The integration suite: one guest boot, host-built binaries over 9p.
integration: deps $(TESTBED) $(BUILD)/integration.test $(BUILD)/nfsrdma-mount
	$(TESTBED) build
	$(TESTBED) run -timeout $(GUEST_TIMEOUT) -env NFSRDMA_MOUNT=/share/$(BUILD)/nfsrdma-mount -- \
		./$(BUILD)/integration.test -test.v -test.count=1 -test.timeout $(SUITE_TIMEOUT)

test: check integration

bench: deps $(TESTBED)
	$(TESTBED) bench

bench-baseline: deps $(TESTBED)
	$(TESTBED) bench-baseline

demo: deps $(TESTBED)
	$(TESTBED) demo

shell: deps $(TESTBED)
	$(TESTBED) shell

clean:
	rm -rf $(BUILD)

# Mutation testing: each listed deliberate break of a rule must make its
# tests fail (scripts/mutations.txt; MUTATE_ONLY=regexp selects ids).
.PHONY: mutate
mutate:
	scripts/mutate.sh scripts/mutations.txt
