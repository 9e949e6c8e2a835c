// Command axon-bench compares Axon with a real etcd on Kubernetes-shaped
// workloads. It is tooling, kept out of the server binary: it runs Axon
// from the axon binary (`axon serve`) and the reference etcd from itself
// (`axon-bench etcd-reference`), each in a process of its own.
package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := rootCmd().ExecuteContext(context.Background()); err != nil {
		os.Exit(1)
	}
}

// rootCmd is the benchmark itself, with the reference etcd it runs as a
// subcommand.
func rootCmd() *cobra.Command {
	root, _, _ := newBenchCmd()
	root.AddCommand(etcdRefCmd())
	root.AddCommand(tikvServerCmd())
	return root
}
