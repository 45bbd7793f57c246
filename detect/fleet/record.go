package fleet

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// recordSchema versions the stored JobRecord.
const recordSchema = 1

// Bounds of one job's record, so that its size does not grow with the job's age or with
// a part that fails a thousand times: recent roots one by one, older ones as hourly counts,
// both within the retention; nodes up to the largest job the detector is built for.
const (
	maxRoots          = 128    // roots kept one by one (open ones always stay)
	maxHourly         = 1024   // hourly counts
	maxRecordNodes    = 16_384 // nodes whose exposure one job books
	incidentsPerCount = 3      // incident ids an hourly count keeps as examples
)

// JobRecord is one job's share of the fleet ledger: the roots its incidents named and the
// job-hours it ran on each node. It is written only by the replica that owns the job.
type JobRecord struct {
	Schema  int       `json:"v"`
	Job     string    `json:"job"`
	Updated time.Time `json:"updated"`
	// Roots are the job's recent roots, one per incident.
	Roots []Root `json:"roots,omitempty"`
	// Hourly are older roots compacted to counts per part, cause and hour.
	Hourly []HourCount `json:"hourly,omitempty"`
	// CompactedThrough: resolved incidents that ended at or before it are in Hourly.
	CompactedThrough time.Time `json:"compacted_through,omitzero"`
	// Exposure is the job-hours on each node, nodes with equal spans grouped.
	Exposure []Span `json:"exposure,omitempty"`
	// Omitted counts nodes and roots left out to stay within the bounds.
	Omitted int `json:"omitted,omitempty"`

	nodes map[string]*nodeSpan // Exposure, by node (decoded)
}

// Root is one incident's root on one or more parts.
type Root struct {
	Incident string         `json:"incident"`
	Kind     incident.Kind  `json:"kind"`
	Cause    incident.Cause `json:"cause,omitempty"`
	Parts    []Part         `json:"parts"`
	SameJob  bool           `json:"same_job,omitempty"`
	At       time.Time      `json:"at"`
	End      time.Time      `json:"end,omitzero"` // resolved at (zero: open)
	Lost     time.Duration  `json:"lost_ns"`
	Revision int            `json:"revision"`
}

// HourCount is the roots of one part and cause that began in one hour.
type HourCount struct {
	Part      Part           `json:"part"`
	Kind      incident.Kind  `json:"kind,omitempty"`
	Cause     incident.Cause `json:"cause,omitempty"`
	SameJob   bool           `json:"same_job,omitempty"`
	Hour      time.Time      `json:"hour"`
	Count     int            `json:"count"`
	Lost      time.Duration  `json:"lost_ns"`
	Incidents []string       `json:"incidents,omitempty"`
}

// Span is the exposure of a group of nodes: the job ran on each from First to Last, for
// Hours job-hours in all (less than Last-First where the node was away for a while).
type Span struct {
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	Hours float64   `json:"hours"`
	Nodes []string  `json:"nodes"`
}

type nodeSpan struct {
	first, last time.Time
	hours       float64
}

// NewRecord returns an empty record of job.
func NewRecord(job string) *JobRecord {
	return &JobRecord{Schema: recordSchema, Job: job, nodes: map[string]*nodeSpan{}}
}

// DecodeRecord reads a stored record.
func DecodeRecord(b []byte) (*JobRecord, error) {
	r := &JobRecord{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("fleet record: %w", err)
	}
	if r.Schema != recordSchema {
		return nil, fmt.Errorf("fleet record of %q: schema %d, want %d", r.Job, r.Schema, recordSchema)
	}
	r.nodes = map[string]*nodeSpan{}
	for _, s := range r.Exposure {
		for _, n := range s.Nodes {
			if len(r.nodes) < maxRecordNodes {
				r.nodes[n] = &nodeSpan{first: s.First, last: s.Last, hours: s.Hours}
			}
		}
	}
	return r, nil
}

// Encode renders the record for etcd, its exposure grouped.
func (r *JobRecord) Encode() ([]byte, error) {
	type key struct {
		first, last int64
		hours       float64
	}
	groups := map[key][]string{}
	for n, s := range r.nodes {
		k := key{s.first.UnixNano(), s.last.UnixNano(), s.hours}
		groups[k] = append(groups[k], n)
	}
	r.Exposure = r.Exposure[:0]
	for k, nodes := range groups {
		sort.Strings(nodes)
		r.Exposure = append(r.Exposure, Span{First: time.Unix(0, k.first).UTC(), Last: time.Unix(0, k.last).UTC(), Hours: k.hours, Nodes: nodes})
	}
	sort.Slice(r.Exposure, func(a, b int) bool { return r.Exposure[a].Nodes[0] < r.Exposure[b].Nodes[0] })
	return json.Marshal(r)
}

// Expose books that the job ran on nodes until now. A node last seen more than maxGap ago
// was away: the gap is not exposure.
func (r *JobRecord) Expose(nodes []string, now time.Time, maxGap time.Duration) {
	for _, n := range nodes {
		s := r.nodes[n]
		if s == nil {
			if len(r.nodes) >= maxRecordNodes {
				r.Omitted++
				continue
			}
			r.nodes[n] = &nodeSpan{first: now, last: now}
			continue
		}
		if d := now.Sub(s.last); d > 0 {
			if d <= maxGap {
				s.hours += d.Hours()
			}
			s.last = now
		}
	}
}

// Book records an incident's roots (parts from PartsOf); it returns whether the record
// changed. An incident booked before is updated in place (its lost time grows while it is
// open); one already compacted is not booked again.
func (r *JobRecord) Book(inc *incident.Incident, parts []Part, sameJob bool) bool {
	if len(parts) == 0 {
		return false
	}
	end := time.Time{}
	if inc.State == incident.StateResolved && inc.ResolvedAt != nil {
		end = *inc.ResolvedAt
	}
	if !end.IsZero() && !r.CompactedThrough.IsZero() && !end.After(r.CompactedThrough) {
		return false
	}
	at := inc.FaultAt
	if at.IsZero() || (!inc.OpenedAt.IsZero() && inc.OpenedAt.Before(at)) {
		at = inc.OpenedAt
	}
	root := Root{Incident: inc.ID, Kind: inc.Kind, Cause: inc.Cause, Parts: parts, SameJob: sameJob, At: at, End: end,
		Lost: LostOf(inc), Revision: inc.Revision}
	for i := range r.Roots {
		if r.Roots[i].Incident == inc.ID {
			if r.Roots[i].Revision >= inc.Revision && r.Roots[i].End.Equal(end) {
				return false
			}
			root.At = r.Roots[i].At
			r.Roots[i] = root
			return true
		}
	}
	r.Roots = append(r.Roots, root)
	return true
}

// Compact keeps the record within its bounds: roots past maxRoots (resolved ones, oldest
// end first) or resolved before now-keepRoots become hourly counts; counts and exposure
// older than the retention go.
func (r *JobRecord) Compact(now time.Time, keepRoots, retention time.Duration) {
	horizon := now.Add(-retention)
	sort.SliceStable(r.Roots, func(a, b int) bool { return r.Roots[a].At.Before(r.Roots[b].At) })
	var resolved []int
	for i, rt := range r.Roots {
		if !rt.End.IsZero() {
			resolved = append(resolved, i)
		}
	}
	sort.SliceStable(resolved, func(a, b int) bool { return r.Roots[resolved[a]].End.Before(r.Roots[resolved[b]].End) })
	drop := map[int]bool{}
	excess := len(r.Roots) - maxRoots
	for _, i := range resolved {
		rt := r.Roots[i]
		if excess <= 0 && now.Sub(rt.End) < keepRoots {
			break
		}
		drop[i] = true
		excess--
		if rt.End.After(r.CompactedThrough) {
			r.CompactedThrough = rt.End
		}
		for _, p := range rt.Parts {
			r.count(p, rt)
		}
	}
	if len(drop) > 0 {
		kept := r.Roots[:0]
		for i, rt := range r.Roots {
			if !drop[i] {
				kept = append(kept, rt)
			}
		}
		r.Roots = kept
	}
	r.Hourly = slices.DeleteFunc(r.Hourly, func(h HourCount) bool { return h.Hour.Before(horizon.Truncate(time.Hour)) })
	if n := len(r.Hourly) - maxHourly; n > 0 {
		sort.SliceStable(r.Hourly, func(a, b int) bool { return r.Hourly[a].Hour.Before(r.Hourly[b].Hour) })
		r.Omitted += n
		r.Hourly = append(r.Hourly[:0], r.Hourly[n:]...)
	}
	for n, s := range r.nodes {
		if s.last.Before(horizon) {
			delete(r.nodes, n)
		}
	}
	r.Updated = now
}

// count adds one root on p to its hourly count.
func (r *JobRecord) count(p Part, rt Root) {
	hour := rt.At.UTC().Truncate(time.Hour)
	for i := range r.Hourly {
		h := &r.Hourly[i]
		if h.Part == p && h.Kind == rt.Kind && h.Cause == rt.Cause && h.Hour.Equal(hour) {
			h.Count++
			h.Lost += rt.Lost
			h.SameJob = h.SameJob || rt.SameJob
			if len(h.Incidents) < incidentsPerCount {
				h.Incidents = append(h.Incidents, rt.Incident)
			}
			return
		}
	}
	r.Hourly = append(r.Hourly, HourCount{Part: p, Kind: rt.Kind, Cause: rt.Cause, SameJob: rt.SameJob, Hour: hour, Count: 1, Lost: rt.Lost,
		Incidents: []string{rt.Incident}})
}

// exposureIn is the job-hours the job ran on node within [from, to], prorated over its span.
func (r *JobRecord) exposureIn(node string, from, to time.Time) float64 {
	s := r.nodes[node]
	if s == nil {
		return 0
	}
	return prorate(s, from, to)
}

func prorate(s *nodeSpan, from, to time.Time) float64 {
	span := s.last.Sub(s.first)
	if span <= 0 || s.hours <= 0 {
		return 0
	}
	lo, hi := s.first, s.last
	if from.After(lo) {
		lo = from
	}
	if to.Before(hi) {
		hi = to
	}
	if !hi.After(lo) {
		return 0
	}
	return s.hours * float64(hi.Sub(lo)) / float64(span)
}
