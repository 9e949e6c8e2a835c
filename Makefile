# Axon — the two set-up commands are `make run` and `make test`.
GO        ?= go
DATA_DIR  ?= ./axon.data
FUZZTIME  ?= 20s

.PHONY: run run-cluster test bench fuzz lint build axon axon-bench conformance sim test-kube bench-kube kube-apiserver

# bin/axon is the server; bin/axon-bench the benchmark against etcd,
# which runs the axon beside it.
build: axon axon-bench

axon:
	$(GO) build -o bin/axon ./cmd/axon

axon-bench:
	$(GO) build -o bin/axon-bench ./cmd/axon-bench

run: axon
	./bin/axon serve --data-dir $(DATA_DIR)

# Production's shape on one machine: a TiKV-speaking endpoint (in memory,
# for tests and demos) and three axon serve instances on loopback; it
# prints their endpoints and how to kill the leader (README, "High
# availability on one machine"). Ctrl-C stops them all.
run-cluster: build
	./scripts/run-cluster.sh

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...
	cd conformance && $(GO) vet ./... && $(GO) test -count=1 -timeout 30m ./...

# The Kubernetes apiserver storage suite against Axon and embedded etcd.
conformance:
	cd conformance && $(GO) test -count=1 -v ./...

# A real kube-apiserver v1.37.2 over Axon (one instance on Badger, three
# over mock TiKV in process, three axon serve processes over the
# tikv-server endpoint) and over embedded etcd, driven by client-go (kube/).
# The apiserver is built from the module proxy into kube/bin (about 15
# minutes the first time, seconds when up to date); the apiserver's logs
# and each setup's observations land in kube/_artifacts. .ci/run runs it,
# with the disk measurement at 300 Pods (DISKPODS=5000 for BENCHMARKS.md's).
DISKPODS ?= 300
test-kube: kube-apiserver
	cd kube && $(GO) vet ./... && rm -rf _artifacts && \
		KUBE_APISERVER=$(CURDIR)/kube/bin/kube-apiserver $(GO) test -count=1 -timeout 30m -v -artifacts ./... -apiserver-disk $(DISKPODS)

# kube-apiserver over Axon (Badger, and three instances over mock TiKV)
# against kube-apiserver over etcd, all up at once and measured in turn:
# creates at 32 and 128 clients, LIST of 10k objects, watch delivery.
# About 20 minutes; the table goes to kube/_artifacts/bench.txt.
KUBEBENCHFLAGS ?=
bench-kube: kube-apiserver
	cd kube && rm -rf _artifacts && KUBE_APISERVER=$(CURDIR)/kube/bin/kube-apiserver \
		$(GO) test -count=1 -timeout 90m -v -run '^TestAPIServerBench$$' . -artifacts \
		-apiserver-bench -apiserver-bench-out $(CURDIR)/kube/_artifacts/bench.txt $(KUBEBENCHFLAGS)

kube-apiserver:
	cd kube/apiserver && $(GO) build -o ../bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver

# A swarm of simulator seeds (SEEDS=10000 for the full one).
SEEDS ?= 1000
sim: axon
	./bin/axon sim --seeds $(SEEDS)

# Microbenchmarks, then Axon against a real etcd (BENCHFLAGS=--quick for
# a smoke run, --scale 1m for memory and restart at one million keys).
BENCHFLAGS ?=
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./core/... ./storage/... ./sim/...
	./bin/axon-bench $(BENCHFLAGS)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzKeyRoundTrip -fuzztime $(FUZZTIME) ./fuzz
	$(GO) test -run '^$$' -fuzz FuzzKeyOrder -fuzztime $(FUZZTIME) ./fuzz
	$(GO) test -run '^$$' -fuzz FuzzEvaluate -fuzztime $(FUZZTIME) ./fuzz
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./fuzz
	$(GO) test -run '^$$' -fuzz FuzzRestore -fuzztime $(FUZZTIME) ./fuzz

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd conformance && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
