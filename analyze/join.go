package analyze

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Join says how a communicator's ranks were matched across processes.
type Join struct {
	// How: "commId" (NCCL printed the same commId on every rank), "split" (a child of a
	// joined parent, by splitCount and color), "inferred" (no commId: see Why) or
	// "unjoined" (could not be matched; never compared).
	How string `json:"how"`
	// Confidence: "exact" for commId and splits; for inferred joins "high" (every rank
	// present once, same creation order, op sequences agree), "medium" (ranks missing, or
	// op sequences differ, which the rules then report) or "low" (several candidates of
	// the same size: matched by host and pid order, and only where their ops agree).
	Confidence string `json:"confidence"`
	Why        string `json:"why,omitempty"`
}

const unjoinedPrefix = "unjoined:"

// candidate is one process's communicator that NCCL printed no commId for.
type candidate struct {
	p    *detect.Proc
	c    *snapshot.Comm
	ord  int  // creation order among the process's candidates of this size
	rank int  // its rank in the communicator
	lrnk bool // the rank came from the launcher, not from an Init line
}

// inferComms gives communicators without a commId (NCCL before 2.18's commId, placeholders
// of logs without Init lines) an identity shared across processes, from what the logs
// give: the size, each process's rank in it, the order each process created its
// communicators, hosts and pids, and the op sequences. Split children of a joined parent
// follow it. It returns how each identity was joined.
func inferComms(procs []*detect.Proc) map[string]Join {
	joins := map[string]Join{}
	type bucketKey struct{ n, ord int }
	buckets := map[bucketKey][]candidate{}
	var keys []bucketKey
	for _, p := range procs {
		seen := map[int]int{}
		for i := range p.Comms {
			c := &p.Comms[i]
			if !strings.HasPrefix(c.ID, unjoinedPrefix) || strings.Contains(c.ID, "/") || c.NRanks < 1 {
				continue
			}
			cd := candidate{p: p, c: c, rank: c.Rank}
			if cd.rank < 0 {
				// Ops without an Init line: the launcher's rank is the rank in the world
				// communicator, if this is one.
				if p.Rank < 0 || p.Rank >= c.NRanks {
					continue
				}
				cd.rank, cd.lrnk = p.Rank, true
			}
			cd.ord = seen[c.NRanks]
			seen[c.NRanks]++
			k := bucketKey{c.NRanks, cd.ord}
			if _, ok := buckets[k]; !ok {
				keys = append(keys, k)
			}
			buckets[k] = append(buckets[k], cd)
		}
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].n != keys[b].n {
			return keys[a].n > keys[b].n
		}
		return keys[a].ord < keys[b].ord
	})
	rename := map[*detect.Proc]map[string]string{}
	for _, k := range keys {
		sets, ambiguous := partition(buckets[k])
		for si, set := range sets {
			id := fmt.Sprintf("inferred:%dranks#%d", k.n, k.ord+1)
			if len(sets) > 1 {
				id += fmt.Sprintf(".%d", si+1)
			}
			j, ok := judge(set, k.n, ambiguous)
			if !ok {
				continue
			}
			joins[id] = j
			for _, cd := range set {
				if rename[cd.p] == nil {
					rename[cd.p] = map[string]string{}
				}
				rename[cd.p][cd.c.ID] = id
				cd.c.Rank = cd.rank
			}
		}
	}
	for p, m := range rename {
		for i := range p.Comms {
			c := &p.Comms[i]
			if to, ok := m[c.ID]; ok {
				c.ID = to
				continue
			}
			// Split children carry their parent's identity before "/".
			if slash := strings.IndexByte(c.ID, '/'); slash > 0 {
				if to, ok := m[c.ID[:slash]]; ok {
					c.ID = to + c.ID[slash:]
				}
			}
		}
	}
	return joins
}

// partition splits a bucket into sets with each rank at most once. Without duplicates the
// bucket is one set; otherwise candidates are taken in host and pid order (a run's
// processes, a node's local ranks, are neighbours) and each goes to the first set that
// lacks its rank.
func partition(cands []candidate) ([][]candidate, bool) {
	dup := false
	seen := map[int]bool{}
	for _, c := range cands {
		dup = dup || seen[c.rank]
		seen[c.rank] = true
	}
	if !dup {
		return [][]candidate{cands}, false
	}
	sorted := append([]candidate(nil), cands...)
	sort.SliceStable(sorted, func(a, b int) bool {
		if sorted[a].p.Host != sorted[b].p.Host {
			return sorted[a].p.Host < sorted[b].p.Host
		}
		return sorted[a].p.PID < sorted[b].p.PID
	})
	var sets [][]candidate
	var has []map[int]bool
	for _, c := range sorted {
		placed := false
		for i := range sets {
			if !has[i][c.rank] && len(sets[i]) < c.c.NRanks {
				sets[i] = append(sets[i], c)
				has[i][c.rank] = true
				placed = true
				break
			}
		}
		if !placed {
			sets = append(sets, []candidate{c})
			has = append(has, map[int]bool{c.rank: true})
		}
	}
	return sets, true
}

// judge decides whether a set is joined and with what confidence.
func judge(set []candidate, n int, ambiguous bool) (Join, bool) {
	if len(set) < 2 {
		return Join{}, false
	}
	j := Join{How: "inferred", Confidence: "high"}
	var why []string
	why = append(why, fmt.Sprintf("no commId; matched by size (%d ranks), each process's rank in it and the order it was created", n))
	launcher := false
	for _, cd := range set {
		launcher = launcher || cd.lrnk
	}
	if len(set) < n {
		j.Confidence = "medium"
		why = append(why, fmt.Sprintf("only %d of %d ranks' logs hold it", len(set), n))
	}
	if launcher {
		j.Confidence = "low"
		why = append(why, "no Init line on some ranks: their rank is the launcher's")
	}
	if ambiguous {
		j.Confidence = "low"
		why = append(why, "several communicators of this size: matched by host and pid order")
	}
	if pos, ok := firstDifference(set); ok {
		if j.Confidence == "low" {
			// A guess whose ops disagree would raise a false mismatch: leave it unjoined.
			return Join{}, false
		}
		j.Confidence = "medium"
		why = append(why, fmt.Sprintf("the op sequences differ at position %d", pos))
	} else {
		why = append(why, "op sequences agree")
	}
	j.Why = strings.Join(why, "; ")
	return j, true
}

// firstDifference is the first position where two members issued different ops.
func firstDifference(set []candidate) (int64, bool) {
	ref := set[0].c
	for _, cd := range set[1:] {
		if cd.c.Count > ref.Count {
			ref = cd.c
		}
	}
	byseq := map[int64]*snapshot.Op{}
	for i := range ref.Recent {
		byseq[ref.Recent[i].Seq] = &ref.Recent[i]
	}
	first := int64(-1)
	for _, cd := range set {
		for i := range cd.c.Recent {
			o := &cd.c.Recent[i]
			if r := byseq[o.Seq]; r != nil && !detect.SameSignature(r, o) && (first < 0 || o.Seq < first) {
				first = o.Seq
			}
		}
	}
	return first, first >= 0
}
