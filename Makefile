# `make test` is the one command that installs what is missing and runs every
# test of every module against real servers (CI runs exactly this through
# .ci/run). The torture tests run last, on their own, so that their verdicts
# are printed.
GO ?= go

# The repository's modules, tied together by go.work: the library, the
# command (with its demo and torture runner), the tests beside other
# clients, and the benchmarks.
MODULES = . cmd/dlock compat etcdlock dlockotel bench
# The packages whose tests run in the main pass: every module's, but the
# torture runner's (scripts/torture.sh) and the benchmarks' (make bench).
# One go test over all of them (go.work makes the other modules' directories
# patterns of this one), so that a long package of one module runs beside
# the packages of the next instead of alone at its module's end; the
# longest (the command's, etcdlock's) are listed first, to start first.
TEST_PACKAGES = ./cmd/dlock/... ./etcdlock/... ./... ./compat/... ./dlockotel/...

.PHONY: test deps vet lint fuzz demo bench

test: deps vet lint
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list $(TEST_PACKAGES) | grep -v '/internal/torture$$')
	$(MAKE) fuzz
	GO=$(GO) scripts/torture.sh

# Every fuzz target, briefly: go test runs their seed corpora
# (testdata/fuzz/) as tests; this also explores beyond them. go test -fuzz
# takes one target at a time. The budget is a count of executions, not a
# duration: with a duration, go1.26's fuzz coordinator can fail a target
# with "context deadline exceeded" as the time runs out on a loaded
# machine (golang/go#75804, fixed in go1.27). FUZZTIME=5m for a longer look.
FUZZTIME ?= 1000x
FUZZ_TARGETS = .:FuzzValidation .:FuzzLockInfoJSON ./pglock:FuzzNames \
	./cmd/dlock:FuzzRun ./cmd/dlock:FuzzShellQuote ./fence:FuzzMemory ./internal/keys:FuzzSameSlot \
	./internal/keys:FuzzDistinct ./internal/backend:FuzzCheckKey ./internal/rnode:FuzzAcquireReply \
	./redlock:FuzzRunID ./pgqueue:FuzzTable

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*}, $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 1s "$${t%%:*}" || exit 1; \
	done

deps:
	@scripts/install-deps.sh

vet:
	@for m in $(MODULES); do echo "vet $$m"; (cd $$m && $(GO) vet ./...) || exit 1; done
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

# staticcheck at a pinned version, through the module proxy.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@for m in $(MODULES); do echo "staticcheck $$m"; (cd $$m && $(GO) run $(STATICCHECK) ./...) || exit 1; done

demo:
	$(GO) run ./cmd/dlock demo

bench:
	bash bench/run.sh
