# `make test` is the one command that installs what is missing and runs every
# test against real servers (CI runs exactly this through .ci/run). The
# torture tests run last, on their own, so that their verdicts are printed.
GO ?= go

.PHONY: test deps vet demo bench

test: deps vet
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/internal/torture$$')
	GO=$(GO) scripts/torture.sh

deps:
	@scripts/install-deps.sh

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./... # its own module: the benchmarks must build too
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

demo:
	$(GO) run ./cmd/dlock demo

bench:
	bash bench/run.sh
