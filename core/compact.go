package core

import "bytes"

// Compact asks to compact history below rev. The answer comes as a
// Response to id once the compact revision is stored.
func (n *Node) Compact(id RequestID, rev int64) {
	switch {
	case n.draining:
		n.respond(id, ErrNotLeader)
		return
	case rev > n.committed && !n.cfg.Testing.CompactAcceptsFuture,
		rev == n.committed && n.cfg.Testing.CompactHeadIsFuture:
		n.respond(id, ErrFutureRev)
		return
	case n.compacting > n.compacted:
		n.compactQueue = append(n.compactQueue, compactAsk{id, rev})
		return
	case rev <= n.compacted:
		n.respond(id, ErrCompacted)
		return
	}
	n.compacting = rev
	n.ready.Work = append(n.ready.Work, &Work{Kind: WorkCompact, ID: id, Rev: rev, Term: n.cfg.Term})
}

func (n *Node) reportCompact(w *Work, out Outcome) {
	if out != Committed {
		// Storing a larger compact revision is idempotent: try again.
		n.ready.Work = append(n.ready.Work, &Work{Kind: WorkCompact, ID: w.ID, Rev: w.Rev, Term: w.Term, Attempt: w.Attempt + 1})
		return
	}
	if w.Rev > n.compacted {
		n.compacted = w.Rev
		n.hub.Compact(w.Rev)
		n.sweepTo(w.Rev)
	}
	n.ready.Responses = append(n.ready.Responses, Response{ID: w.ID, Rev: n.committed})
	for len(n.compactQueue) > 0 && n.compacting <= n.compacted {
		next := n.compactQueue[0]
		n.compactQueue = n.compactQueue[1:]
		n.Compact(next.id, next.rev)
	}
}

// compactAsk is a compaction waiting for the one being stored.
type compactAsk struct {
	id  RequestID
	rev int64
}

// Sweep is a compaction sweep's progress between batches: it deletes what
// compact revision Rev made unreachable, one bounded engine transaction at
// a time, so writes never wait for it.
type Sweep struct {
	Rev int64
	// Next is the engine key to resume from; nil at the start.
	Next []byte
	Done bool
	// Limit bounds the records one batch reads (Evaluate's SweepStep).
	Limit int
}

// SweepStep returns the deletions of the sweep's next batch (at most
// about limit records read) and the sweep's progress after it. What goes:
//   - history records below the newest version of their key at or below
//     Rev, and that version too if it is a tombstone below Rev;
//   - revision records below Rev (watchers from there get ErrCompacted);
//   - latest tombstones and read-only placeholders whose touch revision is
//     at or below Rev: every write still in flight has a higher revision,
//     so the touch they carry orders nothing any more.
//
// Each batch is one engine transaction; one that conflicts with a write is
// simply run again from the same progress.
func SweepStep(rd Reader, s Sweep, limit int) (Sweep, []Write, error) {
	if s.Done {
		return s, nil, nil
	}
	limit = max(limit, 1)
	if s.Next == nil {
		s.Next = spacePrefix(spaceHistory)
	}
	switch {
	case bytes.Compare(s.Next, spacePrefix(spaceHistory+1)) < 0:
		return sweepHistory(rd, s, limit)
	case bytes.HasPrefix(s.Next, spacePrefix(spaceRevision)):
		return sweepRevisions(rd, s, limit)
	case bytes.Compare(s.Next, spacePrefix(spaceLatest+1)) < 0 && bytes.HasPrefix(s.Next, spacePrefix(spaceLatest)):
		return sweepLatest(rd, s, limit)
	}
	s.Done = true
	return s, nil, nil
}

// sweepHistory walks history records in key order; a batch ends only at
// a key boundary so each key's versions are judged together.
func sweepHistory(rd Reader, s Sweep, limit int) (Sweep, []Write, error) {
	var (
		dels     []Write
		key      []byte   // raw key of the group being read
		group    [][]byte // its engine keys at or below Rev, ascending
		lastTomb bool     // the newest of them is a tombstone below Rev
		seen     int
		next     []byte
		decErr   error
	)
	flush := func() {
		if len(group) == 0 {
			return
		}
		keep := len(group) - 1
		if lastTomb {
			// The newest at or below Rev is a tombstone: it goes too. One
			// at Rev itself stays: a watch may start at the compact
			// revision and must see that delete.
			keep = len(group)
		}
		for i := 0; i < keep && i < len(group); i++ {
			dels = append(dels, Write{Key: group[i], Delete: true})
		}
		group, lastTomb = group[:0], false
	}
	// Only a tombstone's record matters, and it is short: the values of
	// the rest (in badger's value log, a random read each) stay unread.
	err := rd.ScanShort(s.Next, spacePrefix(spaceHistory+1), limit+1, maxTombstoneLen, func(k, v []byte) bool {
		raw, rev, err := DecodeHistoryKey(k)
		if err != nil {
			decErr = err
			return false
		}
		if !bytes.Equal(raw, key) {
			if seen >= limit {
				next = bytes.Clone(k)
				return false
			}
			flush()
			key = bytes.Clone(raw)
		}
		seen++
		if rev > s.Rev {
			return true
		}
		tomb := false
		if v != nil { // nil: longer than any tombstone
			rec, err := DecodeRecord(v)
			if err != nil {
				decErr = err
				return false
			}
			tomb = rec.Tombstone
		}
		group = append(group, bytes.Clone(k))
		lastTomb = tomb && rev < s.Rev
		return true
	})
	if err == nil {
		err = decErr
	}
	if err != nil {
		return s, nil, err
	}
	flush()
	if next != nil {
		s.Next = next
		return s, dels, nil
	}
	s.Next = RevisionShardStart(0)
	return s, dels, nil
}

// sweepRevisions deletes the revision records below the compact
// revision, shard after shard.
func sweepRevisions(rd Reader, s Sweep, limit int) (Sweep, []Write, error) {
	var dels []Write
	for len(s.Next) > 5 && int(s.Next[5]) < RevisionShards {
		shard := int(s.Next[5])
		var next []byte
		err := rd.Scan(s.Next, shardRevisionKey(shard, s.Rev), false, limit-len(dels)+1, func(k, _ []byte) bool {
			if len(dels) >= limit {
				next = bytes.Clone(k)
				return false
			}
			dels = append(dels, Write{Key: bytes.Clone(k), Delete: true})
			return true
		})
		if err != nil {
			return s, nil, err
		}
		if next != nil {
			s.Next = next
			return s, dels, nil
		}
		s.Next = RevisionShardStart(shard + 1)
	}
	s.Next = spacePrefix(spaceLatest)
	return s, dels, nil
}

func sweepLatest(rd Reader, s Sweep, limit int) (Sweep, []Write, error) {
	var (
		dels   []Write
		next   []byte
		seen   int
		decErr error
	)
	err := rd.Scan(s.Next, spacePrefix(spaceLatest+1), false, limit+1, func(k, v []byte) bool {
		if seen >= limit {
			next = bytes.Clone(k)
			return false
		}
		seen++
		rec, err := DecodeRecord(v)
		if err != nil {
			decErr = err
			return false
		}
		if rec.Tombstone && rec.ModRev <= s.Rev && rec.Touch <= s.Rev {
			dels = append(dels, Write{Key: bytes.Clone(k), Delete: true})
		}
		return true
	})
	if err == nil {
		err = decErr
	}
	if err != nil {
		return s, nil, err
	}
	if next != nil {
		s.Next = next
		return s, dels, nil
	}
	s.Done = true
	return s, dels, nil
}
