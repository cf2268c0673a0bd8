# `make test` is the one command that installs what is missing and runs every
# test against real servers (CI runs exactly this through .ci/run). The
# torture tests run last, on their own, so that their verdicts are printed.
GO ?= go

.PHONY: test deps vet fuzz demo bench

test: deps vet
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/internal/torture$$')
	cd etcdlock && $(GO) test -race -count=1 -timeout 10m ./... # its own module: a 3-member etcd cluster
	$(MAKE) fuzz
	GO=$(GO) scripts/torture.sh

# Every fuzz target, briefly: go test runs their seed corpora
# (testdata/fuzz/) as tests; this also explores beyond them. go test -fuzz
# takes one target at a time. FUZZTIME=5m for a longer look.
FUZZTIME ?= 5s
FUZZ_TARGETS = .:FuzzValidation ./pglock:FuzzNames ./pglock:FuzzRowCodec \
	./cmd/dlock:FuzzRun ./cmd/dlock:FuzzShellQuote ./fence:FuzzMemory ./internal/keys:FuzzSameSlot \
	./internal/keys:FuzzDistinct ./internal/keys:FuzzCheck ./internal/scripts:FuzzAcquireReply \
	./redlock:FuzzRunID

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 1s "$${t%%:*}" || exit 1; \
	done

deps:
	@scripts/install-deps.sh

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./... # its own module: the benchmarks must build too
	cd etcdlock && $(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

demo:
	$(GO) run ./cmd/dlock demo

bench:
	bash bench/run.sh
