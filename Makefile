# Axon — the two set-up commands are `make run` and `make test`.
GO        ?= go
DATA_DIR  ?= ./axon.data
FUZZTIME  ?= 20s

.PHONY: run test bench fuzz lint build conformance sim

build:
	$(GO) build -o bin/axon ./cmd/axon

run: build
	./bin/axon serve --data-dir $(DATA_DIR)

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...
	cd conformance && $(GO) vet ./... && $(GO) test -count=1 -timeout 30m ./...

# The Kubernetes apiserver storage suite against Axon and embedded etcd.
conformance:
	cd conformance && $(GO) test -count=1 -v ./...

# A swarm of simulator seeds (SEEDS=10000 for the full one).
SEEDS ?= 1000
sim: build
	./bin/axon sim --seeds $(SEEDS)

# Microbenchmarks, then Axon against a real etcd (BENCHFLAGS=--quick for
# a smoke run, --scale 1m for memory and restart at one million keys).
BENCHFLAGS ?=
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./core/... ./storage/... ./sim/...
	./bin/axon bench $(BENCHFLAGS)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzKeyRoundTrip -fuzztime $(FUZZTIME) ./fuzz
	$(GO) test -run '^$$' -fuzz FuzzKeyOrder -fuzztime $(FUZZTIME) ./fuzz
	$(GO) test -run '^$$' -fuzz FuzzEvaluate -fuzztime $(FUZZTIME) ./fuzz
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./fuzz

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd conformance && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
