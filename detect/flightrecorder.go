package detect

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// frNamed bounds the ranks a Flight Recorder finding names in its summary and culprits.
const frNamed = 8

// frManyCulprits is where the analyzer's culprit list stops being trustworthy as it stands:
// it compares every rank with the first rank it read, so when that rank is the odd one
// out, every other rank is named.
const frManyCulprits = 4

// FlightRecorder reads the report of PyTorch's Flight Recorder analyzer pasted with the
// logs: the ranks it names as culprits of a collective whose entries differ (a mismatch)
// and the ranks whose dumps lack a collective the others issued (a hang). The first
// collective it reports is the cause; the analyzer counts later ones on the same process
// group as wrong too, because the histories no longer line up, so they are evidence.
func FlightRecorder(j *Job) []Finding {
	byRank := map[int]*Proc{}
	for _, p := range j.Procs {
		if p.Rank >= 0 {
			byRank[p.Rank] = p
		}
	}
	var culprit, missing *Finding
	for _, p := range j.Procs {
		seq := -1
		for _, e := range p.Events {
			switch e.Kind {
			case snapshot.EventFRCollective:
				seq = e.Code
			case snapshot.EventFRCulprit:
				culprit = frAdd(culprit, e, seq, func() *Finding { return frMismatch(byRank, e, seq) })
			case snapshot.EventFRMissing:
				missing = frAdd(missing, e, seq, func() *Finding { return frMissing(byRank, e, seq) })
			}
		}
	}
	var out []Finding
	for _, f := range []*Finding{culprit, missing} {
		if f != nil {
			out = append(out, *f)
		}
	}
	return out
}

// frAdd makes the finding from the first report of its kind and counts the later ones.
func frAdd(f *Finding, e snapshot.Event, seq int, first func() *Finding) *Finding {
	if len(e.Ranks) == 0 {
		return f
	}
	if f == nil {
		return first()
	}
	if len(f.Evidence) < 6 {
		f.addEvidence("the analyzer then reported %s too: %s (collectives after the first wrong one no longer line up)", frCollective(seq), e.Msg)
	}
	return f
}

func frMismatch(byRank map[int]*Proc, e snapshot.Event, seq int) *Finding {
	f, names := frFinding(incident.KindMismatch, "fr-mismatch:", byRank, e, seq)
	f.Summary = fmt.Sprintf("collective mismatch: PyTorch's Flight Recorder analyzer found %s issued differently by %s (%s); culprit %s",
		frCollective(seq), frRankWords(e.Ranks, e.Code), orUnknown(e.Detail), names)
	if e.Code >= frManyCulprits {
		f.vague = true
		f.Summary += "; the analyzer compares every rank with the first rank it read, so with this many named, that first rank may be the odd one out instead"
	}
	return f
}

func frMissing(byRank map[int]*Proc, e snapshot.Event, seq int) *Finding {
	f, names := frFinding(incident.KindHang, "fr-missing:", byRank, e, seq)
	f.Summary = fmt.Sprintf("hang: PyTorch's Flight Recorder analyzer found %s not joined by %s: their dumps hold no entry for it (stuck before it, or dead); culprit %s",
		frCollective(seq), frRankWords(e.Ranks, e.Code), names)
	return f
}

// frFinding is a finding on the ranks e names, the analyzer's line its evidence.
func frFinding(kind incident.Kind, key string, byRank map[int]*Proc, e snapshot.Event, seq int) (*Finding, string) {
	f := &Finding{Kind: kind, Severity: incident.SeverityCritical, Seq: int64(max(seq, 0)), Key: key + strconv.Itoa(seq)}
	names := frCulprits(f, byRank, e.Ranks)
	f.addEvidence("Flight Recorder analyzer: %s", e.Msg)
	return f, names
}

// frCulprits names the first frNamed ranks as the finding's culprits, as processes where
// the job has their logs.
func frCulprits(f *Finding, byRank map[int]*Proc, ranks []int) string {
	var names []string
	for _, r := range ranks[:min(len(ranks), frNamed)] {
		c := incident.Culprit{Rank: r}
		name := "rank " + strconv.Itoa(r)
		if p := byRank[r]; p != nil {
			c, name = p.Culprit(), p.Name()
			f.culpritKeys = append(f.culpritKeys, p.Key())
		}
		f.Culprits = append(f.Culprits, c)
		names = append(names, name)
	}
	if len(ranks) > frNamed {
		names = append(names, "...")
	}
	return strings.Join(names, ", ")
}

func frCollective(seq int) string {
	if seq < 0 {
		return "a collective"
	}
	return fmt.Sprintf("collective %d (its sequence number in its process group)", seq)
}

// frRankWords says which ranks, bounded: "ranks 22,110", "130 ranks (1,2,...)".
func frRankWords(ranks []int, n int) string {
	var rs []string
	for _, r := range ranks[:min(len(ranks), frNamed)] {
		rs = append(rs, strconv.Itoa(r))
	}
	switch {
	case n == 1:
		return "rank " + rs[0]
	case n > len(rs):
		return fmt.Sprintf("%d ranks (%s,...)", n, strings.Join(rs, ","))
	}
	return "ranks " + strings.Join(rs, ",")
}
