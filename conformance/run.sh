#!/bin/sh
# Runs the Kubernetes apiserver storage conformance suite against Axon and
# against an embedded etcd (the control). Called from the root CI script.
set -eu
cd "$(dirname "$0")"
exec go test -count=1 "$@" ./...
