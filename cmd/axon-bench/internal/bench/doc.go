// Package bench drives Axon and a reference etcd with the same
// Kubernetes-shaped clientv3 workloads and compares them: it is the engine
// of axon-bench.
//
// # Systems
//
// Each system is a child process of the benchmark: Axon is `axon serve`,
// etcd is `axon-bench etcd-reference` (go.etcd.io/etcd/server/v3/embed with
// etcd's defaults, fsync on, one member). Both listen on 127.0.0.1 on ports
// the OS hands out and keep their data in a fresh directory. Systems run one
// after the other, never at once: on a small machine they would take CPU
// from each other.
//
// # Workloads
//
// The workloads that issue single requests run against one long-lived
// server per system, at each client count, with a distinct key prefix per
// workload and client count:
//
//   - create: Txn If ModRevision(k)==0 Then Put Else Get, a new key per op.
//   - update: Get a random key of a preloaded set, then Txn If
//     ModRevision(k)==rev Then Put Else Get. One op is the pair; a failed
//     compare counts as a conflict and not as an op.
//   - delete: Txn If ModRevision(k)==rev Then Delete Else Get on preloaded
//     keys whose revision the preload returned.
//   - get: linearizable Get of a random preloaded key.
//   - list: a paginated (limit 500) read of every object under a prefix, the
//     first page linearizable and the rest at its revision, the way the
//     Kubernetes apiserver lists. One op is a full list.
//   - watch: watchers on a prefix with prev_kv while one writer creates at
//     a fixed rate. One op is an event delivered to one watcher; its latency
//     runs from the writer's ack to the watcher receiving it.
//   - hotkey: clients that all increment one counter key: Get, then Txn If
//     ModRevision(k)==m Then Put(v+1), again from the Get until a Txn
//     applies. One op is an increment, its latency from the first Get; a
//     failed or timed-out request is an error and the increment goes on.
//     Its own client counts, op and time bounds. Afterwards the counter
//     must hold at least the acknowledged increments (else an update was
//     lost) and at most those plus the Txns of unknown outcome.
//
// Two more start servers of their own on fresh directories:
//
//   - memory: load N keys (many clients, batched txns) and read the
//     server's peak RSS (VmHWM).
//   - restart: load N keys, then repeatedly stop the server with SIGTERM and
//     time from starting the process to the first successful linearizable
//     Get. One op is a restart.
//
// Preloads are outside the timed part. A workload ends when it has done its
// op count or its time is up, whichever is first; ops in flight finish.
//
// # Scale scenarios
//
// `--scale lists,storm,churn,keys` runs instead the scale scenarios,
// where etcd is known to break, one system fully before the other
// (RunScale, ScaleReport): each reports one system's outcome as a table of
// metrics with the ratio Axon/etcd. lists, storm and churn put each server
// in a memory cgroup of the same limit (cgroup v1 or v2; needs root) and
// treat a server the kernel kills as an outcome, read from the group's
// oom_kill count: requests in flight then count as failed ("server gone"),
// those not begun as not run.
//
//   - lists: unpaginated Ranges of a large prefix from many clients at once
//     under creates; a refusal with a retryable code is retried, as a
//     reflector relists.
//   - storm: thousands of clients connect at once, list their namespace and
//     watch it from the list's revision under creates; every watcher must
//     get every acknowledged write after its list.
//   - churn: CAS updates, deletes and creates with a compaction per window,
//     then a defragmentation under the same writes.
//   - keys: the same server loaded to growing key counts, measured at each.
//
// # Over TiKV
//
// Two more benchmarks count the round trips of Axon's requests to TiKV,
// on the TiKV benchmark's workloads (create, update, failed-cas, get; see
// tikv.go). RunTiKV (`--store tikv-mock`) runs one `axon serve --store
// tikv-mock` over client-go's in-process mock and reads the counts the
// server keeps. RunCluster (`--store tikv-cluster`) runs production's
// shape beside etcd: three `axon serve --store tikv` processes sharing one
// `axon-bench tikv-server` endpoint, client i on instance i%3, the
// systems alternating as in Run; the endpoint counts what it answers.
// With ClusterOptions.WatchFanout it measures instead, on Axon only, the
// watch fan-out (fanout.go): N watchers pinned to the instances, writes
// through all of them, and the events each instance sent per write.
//
// # Measurements
//
// Per workload and system: ops/s, p50 and p99 latency (from every sample),
// the server's CPU time (utime+stime from /proc/<pid>/stat) and the load
// generator's (getrusage of this process) across the timed part, and the
// server's peak RSS so far. On a small machine the generator competes with
// the server, so ops per server CPU-second is the fairer efficiency figure.
package bench
