#!/usr/bin/env bash
# Production's shape on one machine: a TiKV-speaking endpoint and three
# `axon serve --store tikv` instances on loopback. The endpoint
# (`axon-bench tikv-server`) keeps its data in memory, for tests and
# demos: Ctrl-C stops everything and the data is gone. `make run-cluster`
# runs this after building bin/axon and bin/axon-bench.
#
# Environment: AXON_CLUSTER_BIN (where axon and axon-bench are; default
# bin), AXON_CLUSTER_DIR (logs and pid files; default
# ./axon-cluster.data), AXON_CLUSTER_PD (the endpoint's host:port; default
# 127.0.0.1:2390), AXON_CLUSTER_PORTS (three client ports; default
# "2379 22379 32379"; each instance's metrics port is its client port + 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${AXON_CLUSTER_BIN:-bin}
dir=${AXON_CLUSTER_DIR:-./axon-cluster.data}
pd=${AXON_CLUSTER_PD:-127.0.0.1:2390}
read -r -a ports <<<"${AXON_CLUSTER_PORTS:-2379 22379 32379}"
mkdir -p "$dir"

pids=()
stop() {
	trap - INT TERM EXIT
	echo "stopping the cluster"
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait || true
}
trap stop INT TERM EXIT

"$bin/axon-bench" tikv-server --listen "$pd" >"$dir/tikv-server.log" 2>&1 &
pids+=($!)
echo $! >"$dir/tikv-server.pid"
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/${pd%:*}/${pd#*:}") 2>/dev/null && break
	sleep 0.1
done

endpoints=()
for i in 0 1 2; do
	port=${ports[$i]}
	name=axon-$i
	cmd=("$bin/axon" serve --store tikv --pd-endpoints "$pd" --name "$name" --data-dir "$dir/$name"
		--listen-client-urls "http://127.0.0.1:$port" --listen-metrics-urls "http://127.0.0.1:$((port + 2))")
	echo "${cmd[*]}" >"$dir/$name.cmd"
	"${cmd[@]}" >"$dir/$name.log" 2>&1 &
	pids+=($!)
	echo $! >"$dir/$name.pid"
	endpoints+=("127.0.0.1:$port")
done
eps=$(IFS=,; echo "${endpoints[*]}")

cat <<MSG
Three Axon instances over one TiKV-speaking endpoint (in memory) at $pd:
  clients  $eps
  logs     $dir/*.log, pids in $dir/*.pid
Try:
  etcdctl --endpoints $eps endpoint status -w table     # who leads
  kill -9 \$(cat $dir/axon-N.pid)                        # N: the leader
  etcdctl --endpoints $eps put /k v                      # goes on
  \$(cat $dir/axon-N.cmd) &                              # bring it back
Ctrl-C stops the cluster (the endpoint's data goes with it).
MSG
wait -n "${pids[0]}"
