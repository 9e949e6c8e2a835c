// Package exec runs core's work items against a storage engine: the one
// piece of driver logic that the server and the simulator share. Apply
// evaluates a work item inside an engine transaction and buffers its
// writes; Outcome turns the commit's error into what core.Member.Done
// wants; Run, Recover and CatchUp do a whole item in one transaction for
// drivers that do not need to split begin from commit (the server; the
// simulator splits them to interleave other work in virtual time).
package exec
