# Axon — the two set-up commands are `make run` and `make test`.
GO        ?= go
DATA_DIR  ?= ./axon.data
FUZZTIME  ?= 20s

.PHONY: run test bench fuzz lint build

build:
	$(GO) build -o bin/axon ./cmd/axon

run: build
	./bin/axon serve --data-dir $(DATA_DIR)

test:
	$(GO) vet ./...
	$(GO) test -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./core/... ./storage/...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzKeyRoundTrip -fuzztime $(FUZZTIME) ./fuzz
	$(GO) test -run '^$$' -fuzz FuzzKeyOrder -fuzztime $(FUZZTIME) ./fuzz
	$(GO) test -run '^$$' -fuzz FuzzEvaluate -fuzztime $(FUZZTIME) ./fuzz

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@2025.1.1 ./...
