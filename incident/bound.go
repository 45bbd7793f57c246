package incident

import (
	"encoding/json"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Limits of an incident as it is stored and delivered (Bound). A rule may name every rank
// of a 100k-rank job; etcd takes values up to 1.5 MiB (the watchdog keeps them under
// MaxJSONBytes), PagerDuty events up to 512 KB, a Slack message 50 blocks of 3,000
// characters.
const (
	// MaxOps is how many per-rank ops an incident keeps as they are; with more, the ops
	// are grouped by signature (OpGroups).
	MaxOps = 16
	// MaxOpGroups is how many distinct signatures are listed, the most common first.
	MaxOpGroups = 8
	// MaxOpExamples is how many ranks each signature names.
	MaxOpExamples = 5
	// MaxCulprits and MaxEvidence cap the culprits and evidence lines kept.
	MaxCulprits = 64
	MaxEvidence = 64
	// MaxText caps the summary and each evidence line, in bytes.
	MaxText = 1024
	// MaxJSONBytes bounds the JSON of a bounded incident: under etcd's 64 KB the watchdog
	// allows itself per value, with room for the seal (incident/seal).
	MaxJSONBytes = 60 << 10
)

// OpGroup is one distinct op signature among an incident's ranks.
type OpGroup struct {
	Op Op `json:"op"`
	// Ranks counts the ranks that issued it; Examples names a few of them (Ops keys, in
	// rank order).
	Ranks    int      `json:"ranks"`
	Examples []string `json:"examples"`
}

// Omitted counts what Bound left out of an incident.
type Omitted struct {
	Culprits int `json:"culprits,omitempty"`
	Evidence int `json:"evidence,omitempty"`
	// OpGroups and OpRanks count the signatures beyond MaxOpGroups and their ranks.
	OpGroups int `json:"op_groups,omitempty"`
	OpRanks  int `json:"op_ranks,omitempty"`
	// Text is how many texts (summary, evidence lines) were cut short.
	Text int `json:"text,omitempty"`
}

// Bound returns a copy of inc whose size does not grow with the job: more than MaxOps
// per-rank ops become OpGroups (each distinct signature with its rank count and a few
// example ranks), culprits and evidence are capped, texts cut, and what was left out is
// counted in Omitted. Its JSON stays under MaxJSONBytes whatever the rules produced (its
// ID, Key and Job are kept whole: they are its identity). The detector stores bounded
// incidents and the notifiers render them; a bounded incident is bounded again unchanged.
func Bound(inc Incident) Incident {
	out := inc
	var om Omitted
	if inc.Omitted != nil {
		om = *inc.Omitted
	}
	out.OpGroups = append([]OpGroup(nil), inc.OpGroups...)
	out.Ops = nil
	if len(inc.Ops) > MaxOps {
		groups, droppedGroups, droppedRanks := groupOps(inc.Ops)
		out.OpGroups = append(out.OpGroups, groups...)
		om.OpGroups += droppedGroups
		om.OpRanks += droppedRanks
	} else if inc.Ops != nil {
		out.Ops = make(map[string]Op, len(inc.Ops))
		for k, v := range inc.Ops {
			out.Ops[truncate(k, 64, &om.Text)] = v
		}
	}
	out.Culprits = capSlice(inc.Culprits, MaxCulprits, &om.Culprits)
	out.Evidence = capSlice(inc.Evidence, MaxEvidence, &om.Evidence)
	for i, l := range out.Evidence {
		out.Evidence[i] = truncate(l, MaxText, &om.Text)
	}
	out.Summary = truncate(inc.Summary, MaxText, &om.Text)
	out.Comm = truncate(inc.Comm, 256, &om.Text)
	for i := range out.Culprits {
		c := &out.Culprits[i]
		c.Host, c.GPU, c.Port = truncate(c.Host, 256, &om.Text), truncate(c.GPU, 64, &om.Text), truncate(c.Port, 64, &om.Text)
	}
	if inc.ResolvedAt != nil {
		t := *inc.ResolvedAt
		out.ResolvedAt = &t
	}
	if inc.Episode != nil {
		e := *inc.Episode
		out.Episode = &e
	}
	// The caps above bound each part; the whole is checked, and evidence, then culprits,
	// halved until it fits (only texts near their caps in every field get here).
	out.Omitted = omittedOrNil(om)
	if roughSize(out) <= MaxJSONBytes {
		return out // the usual case: no need to encode it to know
	}
	for size(out) > MaxJSONBytes {
		switch {
		case len(out.Evidence) > 0:
			keep := len(out.Evidence) / 2
			om.Evidence += len(out.Evidence) - keep
			out.Evidence = out.Evidence[:keep]
		case len(out.Culprits) > 1:
			keep := len(out.Culprits) / 2
			om.Culprits += len(out.Culprits) - keep
			out.Culprits = out.Culprits[:keep]
		case len(out.OpGroups) > 1:
			om.OpGroups++
			om.OpRanks += out.OpGroups[len(out.OpGroups)-1].Ranks
			out.OpGroups = out.OpGroups[:len(out.OpGroups)-1]
		default:
			out.Summary = truncate(out.Summary, len(out.Summary)/2, &om.Text)
			if out.Summary == "" || len(out.Summary) < 16 {
				out.Omitted = omittedOrNil(om)
				return out // identity alone is over the limit: nothing more to cut
			}
		}
		out.Omitted = omittedOrNil(om)
	}
	return out
}

func omittedOrNil(om Omitted) *Omitted {
	if om == (Omitted{}) {
		return nil
	}
	return &om
}

// roughSize bounds the JSON size of inc from above without encoding it: every string at
// its worst escaping (6 bytes a byte), every element with room for its names and numbers.
func roughSize(inc Incident) int {
	n := 1280 + 6*(len(inc.ID)+len(inc.Key)+len(inc.Kind)+len(inc.Job)+len(inc.Comm)+len(inc.Summary)+len(inc.Cause))
	for _, c := range inc.Culprits {
		n += 128 + 6*(len(c.Host)+len(c.GPU)+len(c.Port))
	}
	for _, e := range inc.Evidence {
		n += 8 + 6*len(e)
	}
	for k, o := range inc.Ops {
		n += 128 + 6*(len(k)+len(o.Op)+len(o.Datatype)+len(o.RedOp))
	}
	for _, g := range inc.OpGroups {
		n += 160 + 6*(len(g.Op.Op)+len(g.Op.Datatype)+len(g.Op.RedOp))
		for _, e := range g.Examples {
			n += 8 + 6*len(e)
		}
	}
	return n
}

func size(inc Incident) int {
	b, err := json.Marshal(inc)
	if err != nil {
		return 0
	}
	return len(b)
}

// groupOps groups per-rank ops by signature, most ranks first; it returns at most
// MaxOpGroups groups and counts the signatures and ranks beyond them.
func groupOps(ops map[string]Op) (groups []OpGroup, droppedGroups, droppedRanks int) {
	keys := make([]string, 0, len(ops))
	for k := range ops {
		keys = append(keys, k)
	}
	sortRankKeys(keys)
	index := map[Op]int{}
	for _, k := range keys {
		op := ops[k]
		i, ok := index[op]
		if !ok {
			i = len(groups)
			index[op] = i
			groups = append(groups, OpGroup{Op: op})
		}
		g := &groups[i]
		g.Ranks++
		if len(g.Examples) < MaxOpExamples {
			g.Examples = append(g.Examples, truncate(k, 64, new(int)))
		}
	}
	sort.SliceStable(groups, func(a, b int) bool { return groups[a].Ranks > groups[b].Ranks })
	if len(groups) > MaxOpGroups {
		for _, g := range groups[MaxOpGroups:] {
			droppedGroups++
			droppedRanks += g.Ranks
		}
		groups = groups[:MaxOpGroups]
	}
	for i := range groups {
		o := &groups[i].Op
		o.Op, o.Datatype, o.RedOp = truncate(o.Op, 64, new(int)), truncate(o.Datatype, 64, new(int)), truncate(o.RedOp, 64, new(int))
	}
	return groups, droppedGroups, droppedRanks
}

// sortRankKeys orders Ops keys by rank number where they are numbers, else as text.
func sortRankKeys(keys []string) {
	sort.Slice(keys, func(a, b int) bool {
		x, errX := strconv.Atoi(keys[a])
		y, errY := strconv.Atoi(keys[b])
		switch {
		case errX == nil && errY == nil:
			return x < y
		case errX == nil:
			return true
		case errY == nil:
			return false
		}
		return keys[a] < keys[b]
	})
}

func capSlice[T any](s []T, n int, omitted *int) []T {
	if s == nil {
		return nil
	}
	if len(s) > n {
		*omitted += len(s) - n
		s = s[:n]
	}
	return append([]T(nil), s...)
}

// truncate cuts s to at most n bytes on a rune boundary, ending it with "…", and counts
// the cut.
func truncate(s string, n int, cut *int) string {
	if len(s) <= n {
		return s
	}
	*cut++
	const ell = "…"
	if n <= len(ell) {
		return ""
	}
	i := n - len(ell)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + ell
}
