// Package auth is etcd's auth store as a value: Store. Apply changes a
// Clone by one request of etcd's Auth service, with etcd's rules and
// errors, and bumps etcd's auth revision; Check, CheckOp, CheckAdmin and
// CheckLeaseKeys are etcd's permission checks (perm.go); IssueToken and
// Resolve sign and verify tokens with the store's secret (token.go; the
// driver passes the time in and runs bcrypt). The store is engine data
// under MetaAuth, its change counter under MetaAuthSeq; AuthWrites are the
// writes that store it and record format 4. Changes take no KV revision,
// as in etcd: the driver runs them in an engine transaction of their own,
// on the leader, and checks requests against the store before dealing
// them. Which copy of the store a check uses is package driver's rule
// (driver.LookAuth); ReadAuthSeq is the one small read that tells a copy
// is current.
//
// It is pure as package core is (core's purity test covers it), and it
// never touches a Node: it uses only core's key layout and engine types
// (MetaKey, Reader, Write), and core does not import it.
package auth
