// Package kube runs a real kube-apiserver (v1.37.2, built from the module
// proxy by the ./apiserver module) against Axon — one instance on Badger,
// three instances over one mock TiKV cluster in the test process, and three
// `axon serve` processes over one TiKV-speaking endpoint process
// (`axon-bench tikv-server`) — and against embedded
// etcd v3.7.3 as the control, and drives it end to end with client-go.
// Everything lives in the tests; see README.md.
package kube
