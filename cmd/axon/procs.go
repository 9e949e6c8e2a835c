package main

// minProcs is the fewest Ps (GOMAXPROCS) a server runs with when nothing
// limits it to fewer.
//
// Badger compacts its levels in bursts of up to a dozen CPU-bound
// goroutines (a compaction's key ranges, each with its table builders).
// With as many Ps as cores, on a small machine a burst holds every P for
// tens of milliseconds at a stretch, and a write, which passes through
// half a dozen goroutines, queues behind it at each: an execution trace
// of an 8-minute churn on 2 cores showed every executor idle for 160-350
// ms while three compaction goroutines held both Ps, and the longest
// writes were that long. With more Ps than cores the kernel, which slices
// finer and runs a thread that wakes ahead of one that has been running,
// interleaves them: over the same churn the longest write fell from
// 121-267 ms to 76-105 ms and the p99 of the later windows from 49-59 ms
// to 30-34 ms, at the same CPU per write (BENCHMARKS.md, "Long churn").
const minProcs = 8

// procs is the GOMAXPROCS to run with: current (the runtime's choice)
// unless it is the machine's core count and below minProcs. The
// environment's GOMAXPROCS is the operator's word; a current below the
// core count comes from a CPU quota (cgroup cpu.max), under which more
// runnable threads would spend the quota early and be throttled.
func procs(env string, current, cpus int) int {
	if env != "" || current < cpus {
		return current
	}
	return max(current, minProcs)
}
