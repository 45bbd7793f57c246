package detect

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// Lifecycle turns each evaluation's findings into incidents: one per root cause (the
// finding's Key), opened once, updated while it lasts, resolved when it has been clear for
// ResolveAfter. A job's teardown that its evaluation could not tie to a cause (its deaths
// came in after the cause's finding, or the cause's finding ended with the ranks) is folded
// into the critical incident already open for the job. It is pure: state in, changed
// incidents out.
type Lifecycle struct {
	// ResolveAfter is how long a condition must stay clear before its incident resolves,
	// so that one evaluation without the finding does not resolve and reopen it.
	ResolveAfter time.Duration
	// KeepResolved bounds how many resolved incidents are remembered per job.
	KeepResolved int
	// RecurWithin: a root seen again within this long of its incident's resolution reopens
	// that incident as a new episode instead of opening another; an incident that recurred
	// then resolves only after twice its longest quiet spell, so a flapping root is one
	// incident.
	RecurWithin time.Duration

	jobs map[string]*jobIncidents
}

type jobIncidents struct {
	open     map[string]*tracked // by root-cause key
	resolved []incident.Incident // newest last, bounded
	// folded maps the key of each teardown finding folded into an incident to that
	// incident's key, oldest first: once folded, a teardown never opens an incident of its
	// own, even after the one it joined resolved.
	folded []foldedTeardown
}

// maxFolded bounds the teardowns remembered per job: a job is torn down once, or a few
// times when its launcher restarts it.
const maxFolded = 16

type foldedTeardown struct{ teardown, into string }

type tracked struct {
	inc      incident.Incident
	key      string
	clearAt  time.Time     // when the finding was last missing (zero while present)
	snapshot string        // what notifiers see, to tell a real change from a new LastSeen
	torn     string        // the evidence line of a teardown folded into it
	vague    bool          // the finding behind inc could not tell its culprit from the peers
	quiet    time.Duration // its spell unseen before it recurred (0: it never did)
}

// NewLifecycle returns an empty lifecycle.
func NewLifecycle(resolveAfter time.Duration) *Lifecycle {
	return &Lifecycle{ResolveAfter: resolveAfter, KeepResolved: 256, RecurWithin: 10 * time.Minute, jobs: map[string]*jobIncidents{}}
}

func (l *Lifecycle) job(name string) *jobIncidents {
	j := l.jobs[name]
	if j == nil {
		j = &jobIncidents{open: map[string]*tracked{}}
		l.jobs[name] = j
	}
	return j
}

// Restore adopts incidents read back from storage (after a restart or a failover): open
// ones continue with their ids, so nothing is opened or paged twice.
func (l *Lifecycle) Restore(incs []incident.Incident) {
	for _, inc := range incs {
		j := l.job(inc.Job)
		if inc.State == incident.StateOpen {
			j.open[inc.Key] = &tracked{inc: inc, key: inc.Key, snapshot: notifiable(inc)}
		} else {
			j.resolved = append(j.resolved, inc)
		}
	}
	for _, j := range l.jobs {
		sort.Slice(j.resolved, func(a, b int) bool { return resolvedAt(j.resolved[a]).Before(resolvedAt(j.resolved[b])) })
		if n := len(j.resolved) - l.KeepResolved; n > 0 {
			j.resolved = j.resolved[n:]
		}
	}
}

func resolvedAt(i incident.Incident) time.Time {
	if i.ResolvedAt != nil {
		return *i.ResolvedAt
	}
	return i.LastSeen
}

// Update applies one evaluation of a job. It returns the incidents that changed in a way
// notifiers care about (opened, changed culprit/kind/severity/summary, resolved), and
// whether any incident changed at all (LastSeen included) and needs storing.
func (l *Lifecycle) Update(job string, findings []Finding, now time.Time) (notify []incident.Incident, store []incident.Incident) {
	j := l.job(job)
	seen := map[string]bool{}
	var teardowns []*Finding
	for i := range findings {
		f := &findings[i]
		if seen[f.Key] {
			continue
		}
		if f.Teardown != nil && j.open[f.Key] == nil {
			if _, folded := j.foldInto(f); folded {
				teardowns = append(teardowns, f)
				continue
			}
		}
		t := j.open[f.Key]
		if t == nil {
			// A link seen more precisely (a pair, then the NIC of one end) is the same root.
			t = j.refined(f)
		}
		if t != nil && seen[t.key] {
			continue
		}
		seen[f.Key] = true
		if t != nil {
			seen[t.key] = true
		}
		if t == nil {
			if t = j.reopen(f, now, l.RecurWithin); t != nil {
				notify = append(notify, t.inc)
				store = append(store, t.inc)
				continue
			}
			inc := f.Incident(job, now)
			inc.ID = incidentID(job, f.Key, now)
			inc.Revision = 1
			t = &tracked{inc: inc, key: f.Key, vague: f.vague}
			t.snapshot = notifiable(inc)
			j.open[f.Key] = t
			notify = append(notify, t.inc)
			store = append(store, t.inc)
			continue
		}
		t.clearAt = time.Time{}
		prev := t.inc
		next := f.Incident(job, prev.OpenedAt)
		wider := prev.Kind == incident.KindLink && next.Kind == incident.KindLink && len(next.Culprits) > len(prev.Culprits)
		if prev.Kind == next.Kind && (len(prev.Ops) > 0 && len(next.Ops) == 0 || f.vague && !t.vague || wider) {
			// A vaguer view of the same root cause (a mismatch seen through digests once
			// its ops aged out, or once the history that told its culprit apart did; one
			// slow pair of a NIC already named) does not replace the precise one.
			next.Comm, next.Seq, next.Culprits, next.Ops = prev.Comm, prev.Seq, prev.Culprits, prev.Ops
			next.Summary, next.Evidence, next.Victims = prev.Summary, prev.Evidence, prev.Victims
		} else {
			t.vague = f.vague
		}
		next.ID, next.Revision, next.LastSeen, next.Episodes, next.Key = prev.ID, prev.Revision, now, prev.Episodes, prev.Key
		if next.FaultAt.IsZero() || (!prev.FaultAt.IsZero() && prev.FaultAt.Before(next.FaultAt)) {
			next.FaultAt = prev.FaultAt
		}
		if severityRank(prev.Severity) < severityRank(next.Severity) {
			next.Severity = prev.Severity // never downgrade an open incident
		}
		if kindOrder[prev.Kind] < kindOrder[next.Kind] {
			// One root is one incident whatever its picture: a rank that stalled and now
			// only lags stays the hang it was, told what it does now.
			next.Kind, next.Comm, next.Seq = prev.Kind, prev.Comm, prev.Seq
		}
		if evidenced(prev.Cause) && !evidenced(next.Cause) {
			// A cause the root's own evidence showed (its GPU shared, a link) stays the
			// incident's after that evidence is gone (the other process ended first).
			next.Cause = prev.Cause
		}
		next.Evidence = withTeardown(next.Evidence, t.torn)
		if snap := notifiable(next); snap != t.snapshot {
			next.Revision++
			t.snapshot = snap
			notify = append(notify, next)
		}
		t.inc = next
		if next.LastSeen.Sub(prev.LastSeen) >= 5*time.Second || next.Revision != prev.Revision {
			store = append(store, next)
		}
	}
	// A folded teardown is a sighting of the incident it joined: the job stays dead, so
	// its incident stays open while the deaths are reported, though its own finding may
	// have ended with the ranks (a stuck collective, a crash seen first).
	for _, f := range teardowns {
		t, _ := j.foldInto(f)
		if t == nil {
			continue
		}
		seen[t.key], t.clearAt = true, time.Time{}
		if t.torn != f.Teardown.Evidence() {
			t.torn = f.Teardown.Evidence()
			t.inc.Evidence = withTeardown(t.inc.Evidence, t.torn)
			store = append(store, t.inc)
		}
	}
	for key, t := range j.open {
		if seen[key] {
			continue
		}
		if t.clearAt.IsZero() {
			t.clearAt = now
		}
		if now.Sub(t.clearAt) < max(l.ResolveAfter, 2*t.quiet) {
			continue
		}
		inc := t.inc
		at := now
		inc.State, inc.ResolvedAt, inc.Revision = incident.StateResolved, &at, inc.Revision+1
		delete(j.open, key)
		j.resolved = append(j.resolved, inc)
		if len(j.resolved) > l.KeepResolved {
			j.resolved = j.resolved[1:]
		}
		notify = append(notify, inc)
		store = append(store, inc)
	}
	sortIncidents(notify)
	sortIncidents(store)
	return notify, store
}

// refined is the open link incident a link finding refines: one whose ends contain the
// finding's, or are contained in them (a slow pair, then the NIC of one end; a NIC, then one
// of its pairs), nil when none. Link roots are found piecewise as their measurements fill;
// the incident of the first view is the root's.
func (j *jobIncidents) refined(f *Finding) *tracked {
	if f.Kind != incident.KindLink || len(f.Culprits) == 0 {
		return nil
	}
	ends := func(cs []incident.Culprit) map[string]bool {
		m := map[string]bool{}
		for _, c := range cs {
			m[c.Host+":"+strconv.Itoa(c.PID)+":"+strconv.Itoa(c.Rank)+":"+c.Port] = true
		}
		return m
	}
	within := func(a, b map[string]bool) bool {
		for k := range a {
			if !b[k] {
				return false
			}
		}
		return true
	}
	mine := ends(f.Culprits)
	for _, t := range j.open {
		if t.inc.Kind != incident.KindLink || len(t.inc.Culprits) == 0 {
			continue
		}
		if theirs := ends(t.inc.Culprits); within(mine, theirs) || within(theirs, mine) {
			return t
		}
	}
	return nil
}

// reopen continues the incident of a root resolved within `within` as its next episode:
// the earlier span joins its episodes, and the incident opens again under its id.
func (j *jobIncidents) reopen(f *Finding, now time.Time, within time.Duration) *tracked {
	for i := len(j.resolved) - 1; i >= 0; i-- {
		prev := j.resolved[i]
		if prev.Key != f.Key || prev.ResolvedAt == nil || now.Sub(*prev.ResolvedAt) > within {
			continue
		}
		j.resolved = append(j.resolved[:i], j.resolved[i+1:]...)
		inc := f.Incident(prev.Job, prev.OpenedAt)
		ep := incident.Episode{Onset: began(prev), End: *prev.ResolvedAt}
		if prev.Episode != nil {
			ep = *prev.Episode
			if ep.End.IsZero() {
				ep.End = *prev.ResolvedAt
			}
		}
		inc.Episodes = append(slices.Clone(prev.Episodes), ep)
		if n := len(inc.Episodes) - incident.MaxEpisodes; n > 0 {
			inc.Episodes = inc.Episodes[n:]
		}
		inc.ID, inc.Revision, inc.LastSeen = prev.ID, prev.Revision+1, now
		if severityRank(prev.Severity) < severityRank(inc.Severity) {
			inc.Severity = prev.Severity
		}
		// Its quiet spell: from the last evaluation that saw it to now.
		t := &tracked{inc: inc, key: f.Key, vague: f.vague, quiet: now.Sub(prev.LastSeen)}
		t.snapshot = notifiable(inc)
		j.open[f.Key] = t
		return t
	}
	return nil
}

// foldInto says whether a teardown finding folds into an open incident rather than opening
// its own, and which (nil once that incident resolved: the teardown stays folded), and
// remembers the choice. A teardown folds into the earliest open critical incident whose
// fault began before the last death: a hang, a crash, a link or GPU fault the job died of.
// A warning (a straggler) kills no job; a teardown after one is news.
func (j *jobIncidents) foldInto(f *Finding) (*tracked, bool) {
	for _, ft := range j.folded {
		if ft.teardown == f.Key {
			return j.open[ft.into], true
		}
	}
	var into *tracked
	for _, t := range j.open {
		if t.inc.Severity != incident.SeverityCritical || began(t.inc).After(f.Teardown.Last) {
			continue
		}
		if into == nil || began(t.inc).Before(began(into.inc)) || began(t.inc).Equal(began(into.inc)) && t.key < into.key {
			into = t
		}
	}
	if into == nil {
		return nil, false
	}
	if len(j.folded) >= maxFolded {
		j.folded = j.folded[1:]
	}
	j.folded = append(j.folded, foldedTeardown{teardown: f.Key, into: into.key})
	return into, true
}

// began is when an incident's fault began, or else when it opened.
func began(inc incident.Incident) time.Time {
	if inc.FaultAt.IsZero() {
		return inc.OpenedAt
	}
	return inc.FaultAt
}

// withTeardown puts a teardown's evidence line last, replacing an older one.
func withTeardown(evidence []string, line string) []string {
	if line == "" {
		return evidence
	}
	out := make([]string, 0, len(evidence)+1)
	for _, e := range evidence {
		if !strings.HasPrefix(e, teardownPrefix) {
			out = append(out, e)
		}
	}
	return append(out, line)
}

// ResolveJob resolves every open incident of a job (the job ended or was deleted).
func (l *Lifecycle) ResolveJob(job string, now time.Time) []incident.Incident {
	j := l.jobs[job]
	if j == nil {
		return nil
	}
	j.folded = nil
	var out []incident.Incident
	for key, t := range j.open {
		inc := t.inc
		at := now
		inc.State, inc.ResolvedAt, inc.Revision = incident.StateResolved, &at, inc.Revision+1
		delete(j.open, key)
		j.resolved = append(j.resolved, inc)
		out = append(out, inc)
	}
	sortIncidents(out)
	return out
}

// Incidents lists a job's open and remembered resolved incidents ("" = every job).
func (l *Lifecycle) Incidents(job string) []incident.Incident {
	var out []incident.Incident
	for name, j := range l.jobs {
		if job != "" && name != job {
			continue
		}
		for _, t := range j.open {
			out = append(out, t.inc)
		}
		out = append(out, j.resolved...)
	}
	sortIncidents(out)
	return out
}

// Open counts open incidents by kind and severity.
func (l *Lifecycle) Open() map[[2]string]int {
	out := map[[2]string]int{}
	for _, j := range l.jobs {
		for _, t := range j.open {
			out[[2]string{string(t.inc.Kind), string(t.inc.Severity)}]++
		}
	}
	return out
}

// notifiable is the part of an incident whose change is worth telling people.
func notifiable(i incident.Incident) string {
	c := slices.Clone(i.Culprits)
	sort.Slice(c, func(a, b int) bool {
		if c[a].Host != c[b].Host {
			return c[a].Host < c[b].Host
		}
		return c[a].Rank < c[b].Rank
	})
	s := string(i.Kind) + "|" + string(i.Severity) + "|" + string(i.State) + "|" + i.Comm + "|" + strconv.FormatInt(i.Seq, 10)
	for _, x := range c {
		s += "|" + x.Host + ":" + strconv.Itoa(x.Rank) + ":" + strconv.Itoa(x.PID) + ":" + x.Port
	}
	return s
}

func severityRank(s incident.Severity) int { return s.Rank() }

// incidentID is stable for a root cause opened at a moment: short, readable, unique.
func incidentID(job, key string, opened time.Time) string {
	h := sha256.Sum256([]byte(job + "\x00" + key + "\x00" + strconv.FormatInt(opened.UnixNano(), 10)))
	return hex.EncodeToString(h[:6])
}

func sortIncidents(incs []incident.Incident) {
	sort.SliceStable(incs, func(a, b int) bool {
		if !incs[a].OpenedAt.Equal(incs[b].OpenedAt) {
			return incs[a].OpenedAt.Before(incs[b].OpenedAt)
		}
		return incs[a].ID < incs[b].ID
	})
}

// evidenced says whether a cause class rests on evidence beyond the waiting itself; the
// host classes are what is left when nothing else shows.
func evidenced(c incident.Cause) bool {
	return c != incident.CauseUnknown && c != incident.CauseHostSlow && c != incident.CauseHostStalled
}
