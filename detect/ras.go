package detect

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// RASConfig sets when NCCL RAS's count skew is a hang.
type RASConfig struct {
	// RASMinGap is the launched-operation gap that makes a skew a finding on its own. A
	// running job is often one operation apart between two ranks' launches (a healthy
	// capture was reported MISMATCH this way), so a gap of one needs corroboration: the
	// rank behind on several communicators, or PyTorch timeouts.
	RASMinGap int64 `yaml:"-"`
}

// rasBehind is one rank of one communicator that RAS reports behind the others.
type rasBehind struct {
	hash    string
	size    int
	rank    int
	count   int64 // its launched count of the function that differs
	lead    int64 // the most any rank launched
	fn      string
	reports map[string]bool // reports that show it at this count
}

// RAS judges NCCL RAS reports (saved ncclras output offline, the sidecar's RAS client live):
// ranks behind on launched collectives (MISMATCH) are hung where the skew is more than
// RAS's transient one, ranks RAS considers dead are crashed, and per-rank NCCL errors are
// quoted. Ranks are named by their process when the job's logs have the communicator.
func RAS(j *Job, cfg Config) []Finding {
	var names []string
	for n, node := range j.Nodes {
		if node.RAS != nil {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	// A communicator's newest state is the report where it launched the most: an earlier
	// report's skew (a healthy moment before the hang) says nothing about the end.
	newest := map[string]int64{} // hash and function -> most launched
	for _, n := range names {
		for _, c := range j.Nodes[n].RAS.Comms {
			for fn, counts := range rasCounts(&c) {
				for _, v := range counts {
					newest[c.Hash+"/"+fn] = max(newest[c.Hash+"/"+fn], v)
				}
			}
		}
	}
	behind := map[string]*rasBehind{}
	var order []string
	type commRank struct {
		hash       string
		size, rank int
	}
	dead := map[commRank]bool{}
	var deadOrder []commRank
	errs := map[string]string{}
	for _, n := range names {
		rep := j.Nodes[n].RAS
		for _, c := range rep.Comms {
			for r, e := range c.Errors {
				errs[fmt.Sprintf("%s/%d", c.Hash, r)] = e
			}
			deadRanks := c.Dead
			if len(deadRanks) == 0 && rep.Dead > 0 {
				// A text report counts dead processes for the job and lists a
				// communicator's unreachable ranks without saying which are the dead ones.
				deadRanks = c.Unresp
			}
			for _, r := range deadRanks {
				k := commRank{c.Hash, c.Size, r}
				if !dead[k] {
					dead[k] = true
					deadOrder = append(deadOrder, k)
				}
			}
			byFunc := rasCounts(&c)
			for _, fn := range slices.Sorted(maps.Keys(byFunc)) {
				counts := byFunc[fn]
				lead := int64(-1)
				for _, v := range counts {
					lead = max(lead, v)
				}
				if lead < newest[c.Hash+"/"+fn] {
					continue
				}
				for _, r := range slices.Sorted(maps.Keys(counts)) {
					v := counts[r]
					if r < 0 || v >= lead {
						continue
					}
					k := fmt.Sprintf("%s/%d/%d", c.Hash, r, v)
					b := behind[k]
					if b == nil {
						b = &rasBehind{hash: c.Hash, size: c.Size, rank: r, count: v, lead: lead, fn: fn, reports: map[string]bool{}}
						behind[k] = b
						order = append(order, k)
					}
					b.lead = max(b.lead, lead)
					b.reports[n] = true
				}
			}
		}
	}
	timedOut := false
	for _, p := range j.Procs {
		for _, e := range p.Events {
			timedOut = timedOut || e.Kind == snapshot.EventTorchTimeout
		}
	}
	// Communicators each process (or unmapped rank) is behind on: behind on several is no
	// transient skew.
	commsBehind := map[string]map[string]bool{}
	for _, k := range order {
		b := behind[k]
		_, key, _, _ := rasRank(j, b.hash, b.size, b.rank)
		if commsBehind[key] == nil {
			commsBehind[key] = map[string]bool{}
		}
		commsBehind[key][b.hash] = true
	}
	minGap := max(cfg.RASMinGap, 1)
	var out []Finding
	byKey := map[string]int{}
	for _, k := range order {
		b := behind[k]
		culprit, key, name, proc := rasRank(j, b.hash, b.size, b.rank)
		judged := b.lead-b.count >= minGap || len(commsBehind[key]) >= 2 || timedOut
		if !judged || queuedOnGPU(proc, b.hash) || stillIssuing(j, proc) || (proc == nil && candidatesIssuing(j, b.size, b.rank)) {
			continue
		}
		i, ok := byKey[key]
		if !ok {
			f := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Comm: b.hash,
				Seq: b.count + 1, Culprits: []incident.Culprit{culprit}, Key: key}
			if proc != nil {
				f.culpritKeys = []string{proc.Key()}
			}
			// Dated by its last progress (else by this report): RAS says it is behind, not
			// that it will stay so, so certainty grades it like any wait of a live rank.
			f.FaultAt = lastProgressOf(proc)
			if f.FaultAt.IsZero() && !j.Offline {
				f.FaultAt = j.Now
			}
			f.Summary = fmt.Sprintf("NCCL RAS reports %s behind: it launched %d %s operations on communicator %s where others launched %d; the others wait on it",
				name, b.count, b.fn, shortComm(b.hash), b.lead)
			i = len(out)
			byKey[key] = i
			out = append(out, f)
		}
		f := &out[i]
		f.addEvidence("RAS (%s): on communicator %s, %s launched %s up to %d, the most is %d", strings.Join(slices.Sorted(maps.Keys(b.reports)), ", "),
			shortComm(b.hash), name, b.fn, b.count, b.lead)
	}
	for _, k := range deadOrder {
		hash := k.hash
		culprit, key, name, proc := rasRank(j, hash, k.size, k.rank)
		f := Finding{Kind: incident.KindCrash, Severity: incident.SeverityCritical, Comm: hash,
			Culprits: []incident.Culprit{culprit}, Key: key}
		if proc != nil {
			f.culpritKeys = []string{proc.Key()}
		}
		f.Summary = fmt.Sprintf("NCCL RAS considers %s dead: its process is unreachable over the RAS network", name)
		if e := errs[fmt.Sprintf("%s/%d", hash, k.rank)]; e != "" {
			f.addEvidence("RAS: it reported %s", e)
		}
		out = append(out, f)
	}
	return out
}

// rasCounts is, per NCCL function, each reported rank's launched count: from the JSON's
// per-function counts, or the text report's outliers and "N ranks have launched up to"
// groups (whose ranks it does not name: they count as the lead).
func rasCounts(c *snapshot.RASComm) map[string]map[int]int64 {
	out := map[string]map[int]int64{}
	for fn, byRank := range c.Funcs {
		if len(byRank) == 0 {
			continue
		}
		m := map[int]int64{}
		for r, v := range byRank {
			m[r] = v
		}
		out[fn] = m
	}
	for _, g := range c.Groups {
		m := out[g.Func]
		if m == nil {
			m = map[int]int64{}
			out[g.Func] = m
		}
		// Unnamed ranks: a stand-in rank below zero, so the named ones compare with them;
		// stand-ins are never reported behind.
		k := -1 - len(m)
		m[k] = g.Count
	}
	return out
}

// rasRank names a communicator's rank: its process when the job's logs have the
// communicator; else, for a split child (RAS names it by a hash the logs never print),
// the process every logged communicator of that size agrees on, or the only one whose
// logs show that rank behind; else the rank of the communicator.
func rasRank(j *Job, hash string, size, rank int) (incident.Culprit, string, string, *Proc) {
	var candidates, behind []*Proc
	for _, g := range j.Groups {
		exact := sameHash(g.ID, hash)
		if !exact && (size == 0 || g.NRanks != size) {
			continue
		}
		lead := int64(0)
		for _, m := range g.Members {
			lead = max(lead, m.Comm.Count)
		}
		for _, m := range g.Members {
			if m.Comm.Rank != rank {
				continue
			}
			if exact {
				return m.Proc.Culprit(), "rank:" + m.Proc.Key(), m.Proc.Name(), m.Proc
			}
			candidates = append(candidates, m.Proc)
			if m.Comm.Count < lead {
				behind = append(behind, m.Proc)
			}
		}
	}
	// Split communicators' log lines carry no commId: several of one size may be it. When
	// only one of them has that rank behind in its own logs too, that is the one RAS means.
	for _, ps := range [][]*Proc{candidates, behind} {
		if one := soleProc(ps); one != nil {
			return one.Culprit(), "rank:" + one.Key(), one.Name(), one
		}
	}
	return incident.Culprit{Rank: -1}, fmt.Sprintf("ras:%s/%d", hash, rank), fmt.Sprintf("rank %d of communicator %s", rank, shortComm(hash)), nil
}

// stillIssuing: live, the process issued a collective within max(3 s, 2 × the p99 gap
// between its recent ones): 3 s covers a sidecar's publishing and the detector's cycle on
// top of a slowed rank's step (a rank sleeping before its collectives was paged as hung
// while it moved, live on two H100s). RAS's launch counts lag behind the others' for a rank that is
// slow but moving (a straggler is a few launches behind on every communicator); a rank that
// stopped stops issuing, and is judged once that gap has passed.
func stillIssuing(j *Job, p *Proc) bool {
	if p == nil || j.Offline || p.State == snapshot.ProcExited {
		return false
	}
	var newest snapshot.Micros
	var gaps []int64
	for i := range p.Comms {
		c := &p.Comms[i]
		if c.Last != nil {
			newest = max(newest, c.Last.T)
		}
		gaps = append(gaps, opGaps(c)...)
	}
	for i := range p.Comms {
		if d := p.Comms[i].Done; d != nil {
			newest = max(newest, d.LastDone)
		}
	}
	return newest != 0 && j.Now.Sub(newest.Time()) < max(3*time.Second, 2*p99Gap(gaps))
}

// candidatesIssuing: RAS names a rank the logs cannot map to one process (a split child
// whose size several logged communicators share, each with a different process at that
// rank; or none logged). When every process that could be it, or with no candidate every
// process of the job, is still issuing collectives, none of them is hung: the skew is a
// slow rank's, which the straggler rules judge.
func candidatesIssuing(j *Job, size, rank int) bool {
	var ps []*Proc
	for _, g := range j.Groups {
		if size == 0 || g.NRanks != size {
			continue
		}
		for _, m := range g.Members {
			if m.Comm.Rank == rank {
				ps = append(ps, m.Proc)
			}
		}
	}
	if len(ps) == 0 {
		ps = j.Procs
	}
	return len(ps) > 0 && !slices.ContainsFunc(ps, func(p *Proc) bool { return !stillIssuing(j, p) })
}

// soleProc is the one process ps all name, nil when none or several.
func soleProc(ps []*Proc) *Proc {
	if len(ps) == 0 {
		return nil
	}
	for _, p := range ps[1:] {
		if p != ps[0] {
			return nil
		}
	}
	return ps[0]
}

// queuedOnGPU: the profiler plugin shows that the process issued its next collective on the
// communicator and its GPU has not started it. RAS counts launches, so the rank looks behind,
// but its host is not: its GPU runs something else first, often an op that waits for the
// real culprit. CompletionHang judges such a rank after its window, with the cause in view.
func queuedOnGPU(p *Proc, hash string) bool {
	if p == nil {
		return false
	}
	for i := range p.Comms {
		c := &p.Comms[i]
		if !sameHash(c.ID, hash) || c.Done == nil {
			continue
		}
		return queuedColl(c.Done) != nil && p.State != snapshot.ProcExited
	}
	return false
}

// sameHash compares communicator hashes as RAS (zero-padded text, "0x" JSON) and the Init
// lines print them.
func sameHash(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"))
		return strings.TrimLeft(s, "0")
	}
	return norm(a) == norm(b) && norm(a) != ""
}

// lastProgressOf is the newest op time of a process on any communicator (zero when none).
func lastProgressOf(p *Proc) time.Time {
	var t snapshot.Micros
	if p == nil {
		return time.Time{}
	}
	for i := range p.Comms {
		if l := p.Comms[i].Last; l != nil {
			t = max(t, l.T)
		}
	}
	if t == 0 {
		return time.Time{}
	}
	return t.Time()
}
