package detect

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Mismatch finds, per communicator, the first position where ranks issued different
// collectives (op, count, datatype, reduction op or root). With more than two ranks the
// minority are the culprits; with two, the rank that broke its own repeating pattern is.
// Where one rank's sequence is the other's with one op missing, it says which op was skipped.
func Mismatch(j *Job) []Finding {
	found := make([]*Finding, len(j.Groups))
	j.eachGroup(func(i int, g *Group) {
		if len(g.Members) < 2 {
			return
		}
		if f, ok := mismatchInGroup(j, g); ok {
			found[i] = &f
		}
	})
	var out []Finding
	for _, f := range found {
		if f != nil {
			out = append(out, *f)
		}
	}
	return out
}

func mismatchInGroup(j *Job, g *Group) (Finding, bool) {
	lo, hi := int64(1<<62), int64(0)
	for _, m := range g.Members {
		for _, o := range m.Comm.Recent {
			lo, hi = min(lo, o.Seq), max(hi, o.Seq)
		}
		if m.Comm.Last != nil {
			lo, hi = min(lo, m.Comm.Last.Seq), max(hi, m.Comm.Last.Seq)
		}
	}
	for seq := lo; seq <= hi; seq++ {
		ops := make([]*snapshot.Op, len(g.Members))
		n := 0
		for i, m := range g.Members {
			if ops[i] = opAt(m.Comm, seq); ops[i] != nil {
				n++
			}
		}
		if n < 2 || allSame(ops) {
			continue
		}
		return describeMismatch(j, g, seq, ops), true
	}
	if f, ok := markMismatch(j, g); ok {
		return f, true
	}
	return Finding{}, false
}

func allSame(ops []*snapshot.Op) bool {
	var first *snapshot.Op
	for _, o := range ops {
		if o == nil {
			continue
		}
		if first == nil {
			first = o
		} else if !SameSignature(first, o) {
			return false
		}
	}
	return true
}

// signatureKey groups equal signatures.
func signatureKey(o *snapshot.Op) string {
	return fmt.Sprintf("%s|%d|%s|%s|%d", o.Op, o.Count, o.Dtype, o.Red, o.Root)
}

func describeMismatch(j *Job, g *Group, seq int64, ops []*snapshot.Op) Finding {
	f := Finding{Kind: incident.KindMismatch, Severity: incident.SeverityCritical, Comm: g.ID, Seq: seq,
		Ops: map[string]incident.Op{}}
	bySig := map[string][]int{}
	var sigs []string
	for i, o := range ops {
		if o == nil {
			continue
		}
		k := signatureKey(o)
		if _, ok := bySig[k]; !ok {
			sigs = append(sigs, k)
		}
		bySig[k] = append(bySig[k], i)
		f.Ops[strconv.Itoa(g.Members[i].Comm.Rank)] = Op(o)
	}
	sort.SliceStable(sigs, func(a, b int) bool { return len(bySig[sigs[a]]) > len(bySig[sigs[b]]) })
	culprits := map[int]bool{}
	ambiguous := false
	if len(bySig[sigs[0]]) == len(bySig[sigs[1]]) {
		// No majority: the rank whose op breaks its own repeating pattern is the culprit;
		// failing that, the rank whose op is the only one of its kind on the communicator
		// while the others' recur (the pattern may lie in a hole of the history, or have
		// aged out of it).
		some := func(suspect func(i int) bool) bool {
			clear(culprits)
			for i, o := range ops {
				if o != nil && suspect(i) {
					culprits[i] = true
				}
			}
			return len(culprits) > 0 && len(culprits) < countNonNil(ops)
		}
		switch {
		case some(func(i int) bool { return breaksPattern(g.Members[i].Comm, seq) }):
		case some(func(i int) bool { return newToGroup(g, seq, ops[i]) }):
			for i := range culprits {
				f.addEvidence("%s's %s is the only one of its kind on %s: every other rank's op at position %d was issued there at other positions too",
					g.Members[i].Proc.Name(), describeOp(ops[i]), shortComm(g.ID), seq)
			}
		default:
			// Nothing tells them apart: every rank with an op at seq is named.
			ambiguous = true
			some(func(int) bool { return true })
		}
	}
	if len(culprits) == 0 {
		for _, k := range sigs[1:] {
			for _, i := range bySig[k] {
				culprits[i] = true
			}
		}
	}
	if ambiguous {
		f.vague = true
		f.addEvidence("no majority, no repeating pattern and no op new to the communicator tells which rank deviated: every rank at position %d is named", seq)
	}
	idx := make([]int, 0, len(culprits))
	for i := range culprits {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var names []string
	for _, i := range idx {
		p := g.Members[i].Proc
		f.Culprits = append(f.Culprits, p.Culprit())
		f.culpritKeys = append(f.culpritKeys, p.Key())
		names = append(names, p.Name())
	}
	f.Victims = countNonNil(ops) - len(idx)
	refIdx := -1
	for i, o := range ops {
		if o != nil && !culprits[i] {
			refIdx = i
			break
		}
	}
	// Skipped op or different op?
	verdict := ""
	if refIdx >= 0 && len(idx) > 0 {
		ci := idx[0]
		switch {
		case alignedShift(g.Members[ci].Comm, g.Members[refIdx].Comm, seq):
			verdict = fmt.Sprintf("%s skipped %s at position %d: its later ops match the others' shifted by one",
				g.Members[ci].Proc.Name(), describeOp(ops[refIdx]), seq)
		case alignedShift(g.Members[refIdx].Comm, g.Members[ci].Comm, seq):
			verdict = fmt.Sprintf("%s issued an extra %s at position %d: the others' later ops match its own shifted by one",
				g.Members[ci].Proc.Name(), describeOp(ops[ci]), seq)
		}
	}
	// Name ranks as the job knows them (global) when every member's global rank is known;
	// a sub-communicator's own numbering (0..n-1) would point at the wrong processes.
	global := true
	for _, m := range g.Members {
		global = global && m.Proc.Rank >= 0
	}
	var parts []string
	for _, k := range sigs {
		var rs []string
		for _, i := range bySig[k] {
			r := g.Members[i].Comm.Rank
			if global {
				r = g.Members[i].Proc.Rank
			}
			rs = append(rs, strconv.Itoa(r))
		}
		which := "communicator rank"
		if global {
			which = "global rank"
		}
		parts = append(parts, fmt.Sprintf("%s on %s %s", describeOp(ops[bySig[k][0]]), which, strings.Join(rs, ",")))
	}
	f.Summary = fmt.Sprintf("collective mismatch at position %d of communicator %s (%d ranks): %s; culprit %s",
		seq, shortComm(g.ID), g.NRanks, strings.Join(parts, " vs "), strings.Join(names, ", "))
	if verdict != "" {
		f.addEvidence("%s", verdict)
	}
	for i, o := range ops {
		if o == nil {
			continue
		}
		m := g.Members[i]
		f.addEvidence("%s issued %s as op %d on %s (it has issued %d)", m.Proc.Name(), describeOp(o), seq, shortComm(g.ID), m.Comm.Count)
	}
	if len(idx) > 0 {
		f.FaultAt = ops[idx[0]].T.Time()
	}
	// One root cause per communicator: once histories diverge they stay diverged, and a
	// later evaluation may only see the divergence through the digests.
	f.Key = "mismatch:" + g.ID
	return f
}

func countNonNil(ops []*snapshot.Op) int {
	n := 0
	for _, o := range ops {
		if o != nil {
			n++
		}
	}
	return n
}

// alignedShift reports whether a's ops from seq on equal b's from seq+1 on: a skipped b's op at seq.
func alignedShift(a, b *snapshot.Comm, seq int64) bool {
	matched := 0
	for s := seq; ; s++ {
		oa, ob := opAt(a, s), opAt(b, s+1)
		if oa == nil || ob == nil {
			break
		}
		if !SameSignature(oa, ob) {
			return false
		}
		matched++
	}
	return matched >= 1
}

// newToGroup reports whether o's signature is the only one of its kind in the group's kept
// history: no member issued it at another position. With no other op kept it cannot tell,
// and says no. Ops after seq count too: the ops before seq age out of the history first.
func newToGroup(g *Group, seq int64, o *snapshot.Op) bool {
	others := false
	for _, m := range g.Members {
		for i := range m.Comm.Recent {
			e := &m.Comm.Recent[i]
			if e.Seq == seq {
				continue
			}
			if SameSignature(e, o) {
				return false
			}
			others = true
		}
	}
	return others
}

// breaksPattern reports whether the op at seq differs from the one a period earlier.
func breaksPattern(c *snapshot.Comm, seq int64) bool {
	p := Period(c, seq)
	if p == 0 {
		return false
	}
	cur, prev := opAt(c, seq), opAt(c, seq-p)
	return cur != nil && prev != nil && !SameSignature(cur, prev)
}

// covered reports whether every member has every op in [from, to].
func covered(g *Group, from, to int64) bool {
	for _, m := range g.Members {
		for seq := from; seq <= to; seq++ {
			if opAt(m.Comm, seq) == nil {
				return false
			}
		}
	}
	return true
}

// markMismatch compares the digests at aligned positions: equal digests mean equal histories,
// so a difference before the recent window still shows, as an interval.
func markMismatch(j *Job, g *Group) (Finding, bool) {
	type mark struct {
		digest string
		member int
	}
	// The plugin's digests leave out the reduction op the log's fold in: each is compared
	// only with digests of its own kind.
	type at struct {
		seq    int64
		plugin bool
	}
	bySeq := map[at][]mark{}
	for i, m := range g.Members {
		for _, mk := range m.Comm.Marks {
			k := at{mk.Seq, strings.HasPrefix(mk.Digest, snapshot.PluginDigest)}
			bySeq[k] = append(bySeq[k], mark{mk.Digest, i})
		}
	}
	var seqs []at
	for s, ms := range bySeq {
		if len(ms) >= 2 {
			seqs = append(seqs, s)
		}
	}
	sort.Slice(seqs, func(a, b int) bool {
		if seqs[a].seq != seqs[b].seq {
			return seqs[a].seq < seqs[b].seq
		}
		return !seqs[a].plugin
	})
	lastEqual := int64(0)
	for _, k := range seqs {
		ms, s := bySeq[k], k.seq
		counts := map[string][]int{}
		for _, mk := range ms {
			counts[mk.digest] = append(counts[mk.digest], mk.member)
		}
		if len(counts) == 1 {
			lastEqual = s
			continue
		}
		if covered(g, lastEqual+1, s) {
			// Every op in between was compared one by one and found equal: the digests
			// cannot disagree there, so this is not a mismatch in the ops we judge.
			return Finding{}, false
		}
		f := Finding{Kind: incident.KindMismatch, Severity: incident.SeverityCritical, Comm: g.ID, Seq: lastEqual + 1}
		// Minority digests are the culprits.
		var best []int
		for _, members := range counts {
			if len(members) > len(best) {
				best = members
			}
		}
		inBest := map[int]bool{}
		for _, i := range best {
			inBest[i] = true
		}
		var names []string
		for _, mk := range ms {
			if inBest[mk.member] && len(counts) > 1 && len(best)*2 > len(ms) {
				continue
			}
			p := g.Members[mk.member].Proc
			f.Culprits = append(f.Culprits, p.Culprit())
			f.culpritKeys = append(f.culpritKeys, p.Key())
			names = append(names, p.Name())
		}
		f.Summary = fmt.Sprintf("collective mismatch on communicator %s between positions %d and %d: the ranks' op histories differ; culprit %s",
			shortComm(g.ID), lastEqual+1, s, strings.Join(names, ", "))
		f.addEvidence("op-history digests agree up to position %d and differ at position %d; the exact op is older than the recent ops kept", lastEqual, s)
		f.Key = "mismatch:" + g.ID
		return f, true
	}
	return Finding{}, false
}
