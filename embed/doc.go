// Package embed starts an Axon server in a Go program, as etcd's embed
// package starts etcd: `axon serve`, the tests of cmd/axon, kube/ and
// conformance/ all start their servers through it, so what they test is
// what the binary runs.
//
// A caller fills a Config (NewConfig has the defaults of serve's flags),
// calls Start, and later Close:
//
//	cfg := embed.NewConfig()
//	cfg.DataDir = dir
//	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
//	a, err := embed.Start(ctx, cfg)
//	if err != nil { ... }
//	defer a.Close()
//	cli, err := clientv3.New(clientv3.Config{Endpoints: a.ClientAddrs()})
//
// Start, in order: validates the configuration and builds its TLS; binds
// the metrics listeners and serves them at once (/readyz answers 503 until
// the instance serves); binds the client and peer listeners (a port of 0
// is chosen by the system, and advertised as bound); opens the engine, or
// takes over Config.Engine; runs server.New, which for an exclusive
// engine recovers the node and leads before it returns; then serves gRPC
// and the JSON gateway on the client listeners and the peer service on
// the peer listeners, and sets the instance ready. Err reports a client
// or peer listener that fails afterwards.
//
// Close is serve's shutdown on SIGTERM: not ready, leadership handed over,
// HTTP streams cut, a grace for calls in flight, then the server, the
// engine and the metrics listeners close. Its error says when the data
// directory failed while serving. HardStop skips the handoff and the
// grace, as a crash would.
//
// What belongs to the process is left to the caller, as etcd's embed
// leaves it: signals; a timer that ends a process whose shutdown hangs
// (a failed disk can hang the engine's close for good); GOMAXPROCS; Go's
// soft memory limit (debug.SetMemoryLimit); the logger's output and
// level. Start works out the memory budget (Config.MemoryBudget) the same
// way serve does, for Badger and the bound on reads in flight, but sets
// no process-wide limit: several instances may share one test process.
//
// Errors name the serve flag of the setting at fault (--metrics,
// --auto-compaction-retention, ...), since serve is the main user and
// every Config field names its flag.
package embed
