// Package conformance runs the Kubernetes apiserver storage test suite
// (k8s.io/apiserver/pkg/storage/testing) against the etcd3 store backed by
// an in-process Axon server, and against an embedded etcd as the control.
package conformance
