package detect

import (
	"slices"
	"sort"

	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
)

// findings holds one evaluation's findings between the steps of the explains table, one
// field per role, in the order of knowledge.Roles (crash, mismatch, inversion, stall, stuck,
// link, cause, ras, fallback, note).
type findings struct {
	crashes, mism, inversions, stalls, stuck, links, errors, ras, nccl, rest []Finding
	// teardown holds the host:pid of the deaths of the job's teardown (findTeardown).
	teardown map[string]bool
	torn     Teardown
}

// bucket holds the findings of a role (an unknown one: the notes).
func (fs *findings) bucket(r knowledge.Role) *[]Finding {
	i := slices.Index(knowledge.Roles, r)
	if i < 0 {
		return &fs.rest
	}
	return [...]*[]Finding{&fs.crashes, &fs.mism, &fs.inversions, &fs.stalls, &fs.stuck, &fs.links, &fs.errors, &fs.ras,
		&fs.nccl, &fs.rest}[i]
}

// add files findings under their role.
func (fs *findings) add(fl ...Finding) {
	for _, f := range fl {
		b := fs.bucket(f.role)
		*b = append(*b, f)
	}
}

// flatten lists the findings in the order of knowledge.Roles, each taking its bucket's role.
func (fs *findings) flatten() []*Finding {
	var out []*Finding
	for _, r := range knowledge.Roles {
		b := *fs.bucket(r)
		for i := range b {
			b[i].role = r
			out = append(out, &b[i])
		}
	}
	return out
}

// rebuild files a flattened list back by role, less the findings gone (or changed role:
// false).
func (fs *findings) rebuild(list []*Finding, gone map[*Finding]bool) {
	next := findings{teardown: fs.teardown, torn: fs.torn}
	for _, f := range list {
		if !gone[f] {
			next.add(*f)
		}
	}
	*fs = next
}

// all lists the findings in the order that settles sortFindings' ties.
func (fs *findings) all() []Finding {
	var out []Finding
	for _, f := range fs.flatten() {
		out = append(out, *f)
	}
	return out
}

// causes are the findings that name a root cause other findings may follow from.
func (fs *findings) causes() [][]Finding {
	return [][]Finding{fs.crashes, fs.mism, fs.inversions, fs.stalls, fs.errors}
}

// hasCause reports a critical finding: a root cause the job's failure is explained by.
func hasCause(fs *findings) bool {
	return slices.ContainsFunc(fs.flatten(), func(f *Finding) bool { return f.Severity == incident.SeverityCritical })
}

// reasoners are the steps of the explains table that no row can say (named there).
var reasoners = map[string]func(*Job, Config, *findings){
	"witnesses": witnessesFoldIntoTheirRoot, "teardown": findTeardown, "one-rank": deathAndStallOfOneRank,
	"teardown-cause": teardownFoldsIntoItsCause, "torch-alone": torchTimeoutsWithoutCause,
	"torch-evidence": torchTimeoutsAreEvidence,
}

// explain runs the explains table (knowledge/explains.csv), or only the steps named: each
// step, a pass of its rows or a reasoner, folds consequences into the finding of their root
// cause.
func explain(j *Job, cfg Config, fs *findings, only ...string) {
	rules := knowledge.Explains
	for i, k := 0, 0; i < len(rules); i = k {
		for k = i + 1; k < len(rules) && rules[k].Step == rules[i].Step; k++ {
		}
		step := rules[i:k]
		switch reason := reasoners[step[0].Step]; {
		case len(only) > 0 && !slices.Contains(only, step[0].Step):
		case step[0].Action == "reason" && reason != nil:
			reason(j, cfg, fs)
		case step[0].Action != "reason":
			p := &pass{j: j, cfg: cfg, list: fs.flatten(), gone: map[*Finding]bool{}, sources: map[*knowledge.Rule][]*Finding{},
				members: map[string]map[string]bool{}}
			if p.run(step); len(p.gone) > 0 {
				fs.rebuild(p.list, p.gone)
			}
		}
	}
}

// pass is one step of rows over the findings, flattened.
type pass struct {
	j    *Job
	cfg  Config
	list []*Finding
	gone map[*Finding]bool // folded into another, or dropped
	// sources are each row's, in its lead's order, until a finding changes role.
	sources map[*knowledge.Rule][]*Finding
	members map[string]map[string]bool // communicator: its members' host:pid
}

// run gives each target the first of the rows that finds it a source (or needs none).
func (p *pass) run(rules []knowledge.Rule) {
	var targets []*Finding
	for _, f := range p.list {
		if slices.ContainsFunc(rules, func(r knowledge.Rule) bool { return p.holds(r.Target, f) }) {
			targets = append(targets, f)
		}
	}
	if rules[0].Earliest && !rules[0].ToLead {
		// A source before each target: the targets that fold into one another go in order.
		sort.SliceStable(targets, func(a, b int) bool { return leads(targets[a], targets[b]) })
	}
	behind := map[*Finding]int{}
	var waitedOn []*Finding
	for _, t := range targets {
		for i := range rules {
			r := &rules[i]
			if !p.holds(r.Target, t) {
				continue
			}
			var s *Finding
			if len(r.Source) > 0 {
				if s = p.source(r, t); s == nil {
					continue
				}
			}
			p.gone[t] = r.Action != "become"
			switch r.Action {
			case "absorb":
				absorb(s, t)
			case "follow":
				s.addEvidence("then: %s", t.Summary)
			case "behind":
				if behind[s]++; behind[s] == 1 {
					waitedOn = append(waitedOn, s)
				}
			case "become":
				// Its place in the list puts it after the findings of its new role (a role
				// earlier in knowledge.Roles).
				t.role, p.sources = r.Become, map[*knowledge.Rule][]*Finding{}
			}
			break
		}
	}
	for _, s := range waitedOn {
		s.addEvidence("%d other communicator(s) are level and wait behind it, their GPUs spinning", behind[s])
	}
}

// source finds the finding that explains t by rule r, nil for none. Where r relates t to
// the lead (later, not-earlier, any), only the lead is asked; a target never folds into one
// after it in the lead (a row whose source also holds for its target).
func (p *pass) source(r *knowledge.Rule, t *Finding) *Finding {
	cands, ok := p.sources[r]
	if !ok {
		roles := r.Source.Roles()
		if roles == nil {
			roles = knowledge.Roles
		}
		for _, role := range roles {
			for _, f := range p.list {
				if f.role == role && !p.gone[f] && p.holds(r.Source, f) {
					cands = append(cands, f)
				}
			}
		}
		if r.Earliest {
			sort.SliceStable(cands, func(a, b int) bool { return leads(cands[a], cands[b]) })
		}
		p.sources[r] = cands
	}
	for _, s := range cands {
		if p.gone[s] {
			continue
		}
		if s == t {
			return nil
		}
		if slices.ContainsFunc(r.Equal, func(e string) bool { return p.related(e, s, t) }) {
			return s
		}
		if r.ToLead {
			return nil
		}
	}
	return nil
}

// related says whether s and t share what relation e names (knowledge/explains.csv).
func (p *pass) related(e string, s, t *Finding) bool {
	switch e {
	case "culprit":
		return slices.ContainsFunc(s.culpritKeys, func(k string) bool { return slices.Contains(t.culpritKeys, k) })
	case "key":
		return s.Key == t.Key
	case "comm":
		return s.Comm != "" && (s.Comm == t.Comm || slices.Contains(t.comms, s.Comm))
	case "member":
		in := p.membersOf(s.Comm)
		return len(t.culpritKeys) > 0 && !slices.ContainsFunc(t.culpritKeys, func(k string) bool { return !in[k] })
	case "sender":
		return len(s.culpritKeys) > 0 && len(t.culpritKeys) > 0 && s.culpritKeys[0] == t.culpritKeys[0]
	case "later":
		return !s.FaultAt.IsZero() && !t.FaultAt.IsZero() && !t.FaultAt.Before(s.FaultAt)
	case "not-earlier":
		return s.FaultAt.IsZero() || t.FaultAt.IsZero() || !t.FaultAt.Before(s.FaultAt)
	}
	return e == "any"
}

// membersOf is the host:pid of the members of a communicator.
func (p *pass) membersOf(comm string) map[string]bool {
	if _, ok := p.members[comm]; !ok {
		p.members[comm] = map[string]bool{}
		for _, g := range p.j.Groups {
			if g.ID == comm {
				for _, m := range g.Members {
					p.members[comm][m.Proc.Key()] = true
				}
			}
		}
	}
	return p.members[comm]
}

// holds evaluates a matcher of the table on a finding's facets.
func (p *pass) holds(m knowledge.Match, f *Finding) bool {
	return m.Holds(func(facet string) string {
		flag := false
		switch facet {
		case "role":
			return string(f.role)
		case "kind":
			return string(f.Kind)
		case "cause":
			return string(f.Cause)
		case "severity":
			return string(f.Severity)
		case "origin":
			return string(f.origin)
		case "measured":
			flag = f.measured
		case "dated":
			flag = !f.FaultAt.IsZero()
		case "culprits":
			flag = len(f.culpritKeys) > 0
		case "level":
			flag = levelInLogs(p.j, f.Comm)
		case "unconfirmed":
			flag = f.witness && !witnessStands(p.j, p.cfg, f)
		}
		if flag {
			return "yes"
		}
		return ""
	})
}

// leads orders findings by which explains first: the earlier fault (an unknown start last);
// between deaths at once, the one likelier to have started it; then the wider.
func leads(a, b *Finding) bool {
	switch {
	case !a.FaultAt.Equal(b.FaultAt):
		return earlier(a, b)
	case a.Kind == incident.KindCrash && b.Kind == incident.KindCrash && firstToFail(a, b) != firstToFail(b, a):
		return firstToFail(a, b)
	}
	return a.Victims > b.Victims
}

// absorb records a consequence in the finding of its root cause.
func absorb(cause, consequence *Finding) {
	cause.addEvidence("also: %s", consequence.Summary)
}

// without returns the findings not marked, in order.
func without(fs []Finding, marked []bool) []Finding {
	var out []Finding
	for i := range fs {
		if !marked[i] {
			out = append(out, fs[i])
		}
	}
	return out
}
