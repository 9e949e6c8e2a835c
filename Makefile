# Axon — the two set-up commands are `make run` and `make test`.
GO        ?= go
DATA_DIR  ?= ./axon.data
FUZZTIME  ?= 20s

.PHONY: run test bench fuzz lint build conformance sim test-kube

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

# A real kube-apiserver v1.37.2 over Axon (one instance on Badger, three
# over mock TiKV) and over embedded etcd, driven by client-go (kube/).
# The apiserver is built from the module proxy into kube/bin (about 15
# minutes the first time, seconds when up to date); the apiserver's logs
# and each setup's observations land in kube/_artifacts. Not yet run by
# .ci/run: about 1 run in 4 fails on a leader kill (see kube/README.md).
test-kube:
	cd kube/apiserver && $(GO) build -o ../bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
	cd kube && $(GO) vet ./... && rm -rf _artifacts && \
		KUBE_APISERVER=$(CURDIR)/kube/bin/kube-apiserver $(GO) test -count=1 -timeout 30m -v -artifacts ./...

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
