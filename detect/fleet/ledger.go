package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Prefix holds the fleet ledger in etcd: one record per job (RecordKey), written only
// under the fence of the job's owner, and the node incidents (IncidentKey), written only
// under the leader's. Every key carries a lease of the retention, so that a job that ended
// leaves nothing behind after it.
const Prefix = snapshot.Prefix + "fleet/"

// RecordKey is where a job's record is kept.
func RecordKey(job string) string { return Prefix + "jobs/" + job }

// IncidentKey is where a node incident is kept.
func IncidentKey(id string) string { return Prefix + "incidents/" + id }

// JobRun is one job the calling replica owns, as of this cycle.
type JobRun struct {
	Job    string
	Nodes  []string // its live nodes
	Places Places
	// Fence is the comparison its writes must pass (the job's owner key at the revision
	// this replica created it); Term identifies it: a new Term is a new ownership.
	Fence clientv3.Cmp
	Term  int64
}

// Cycle is what the detector hands the ledger after each evaluation.
type Cycle struct {
	Now  time.Time
	Jobs []JobRun
	// Incidents of those jobs as stored (any state): the engine's output.
	Incidents []incident.Incident
	// Leader, set while this replica leads, fences the node incidents' writes.
	Leader *clientv3.Cmp
}

// Options complete a Ledger.
type Options struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Ledger books the roots of the jobs this replica owns into etcd, reads the whole ledger
// back for the view and the metrics, and, while this replica leads, judges node incidents.
// Observe is called from one goroutine (the detector's term); View and Handler from any.
type Ledger struct {
	cli *clientv3.Client
	cfg Config
	log *slog.Logger
	m   *metrics

	jobs     map[string]*ownedRecord // Observe's goroutine only
	lease    clientv3.LeaseID
	leaseAt  time.Time
	lastRead time.Time
	readSoon bool
	nodeIncs map[string]*NodeIncident // stored node incidents by part key, as last read
	dueSig   int64
	dueAt    time.Time

	mu     sync.Mutex // guards view
	view   *View
	viewAt time.Time
}

type ownedRecord struct {
	rec     *JobRecord
	term    int64
	fence   clientv3.Cmp
	dirty   bool
	flushed time.Time
}

// New returns a ledger on cli.
func New(cli *clientv3.Client, cfg Config, o Options) *Ledger {
	cfg.Defaults()
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Ledger{cli: cli, cfg: cfg, log: o.Logger, m: newMetrics(o.Registerer), jobs: map[string]*ownedRecord{},
		nodeIncs: map[string]*NodeIncident{}}
}

// Config returns the ledger's configuration, defaults filled.
func (l *Ledger) Config() Config { return l.cfg }

// sampleEvery is how often a cycle is wanted when no incident changed: exposure is
// sampled, flushes and judging fall due.
const sampleEvery = 30 * time.Second

// Due says whether the detector should hand over a cycle: its owned jobs' incidents
// changed (sig), or sampleEvery passed (less when JudgeEvery is shorter, as in tests).
func (l *Ledger) Due(now time.Time, sig int64) bool {
	every := min(sampleEvery, l.cfg.JudgeEvery, l.cfg.FlushEvery)
	if sig == l.dueSig && now.Sub(l.dueAt) < every && now.Sub(l.dueAt) >= 0 {
		return false
	}
	l.dueSig, l.dueAt = sig, now
	return true
}

// opTimeout bounds one etcd call of the ledger.
const opTimeout = 3 * time.Second

// Observe books a cycle: exposure of the owned jobs' nodes, roots of their incidents,
// written when a root changed or every FlushEvery; then, every JudgeEvery (sooner after a
// new root), reads the ledger back and, while leading, judges it. It returns the node
// incidents that opened, changed or resolved and were stored, for the caller to announce.
func (l *Ledger) Observe(ctx context.Context, c Cycle) []incident.Incident {
	byJob := map[string][]*incident.Incident{}
	for i := range c.Incidents {
		byJob[c.Incidents[i].Job] = append(byJob[c.Incidents[i].Job], &c.Incidents[i])
	}
	live := map[string]bool{}
	for _, run := range c.Jobs {
		live[run.Job] = true
		o := l.jobs[run.Job]
		if o == nil || o.term != run.Term {
			rec, err := l.load(ctx, run.Job)
			if err != nil {
				l.log.Warn("read a job's fleet record; booking it later", "job", run.Job, "err", err)
				continue
			}
			o = &ownedRecord{rec: rec, term: run.Term, fence: run.Fence, flushed: c.Now}
			l.jobs[run.Job] = o
		}
		o.rec.Expose(run.Nodes, c.Now, l.cfg.MaxGap)
		booked := false
		for _, inc := range byJob[run.Job] {
			parts, sameJob := PartsOf(inc, run.Places)
			if o.rec.Book(inc, parts, sameJob) {
				booked = true
			}
		}
		if booked {
			o.dirty = true
			l.readSoon = true
		}
		if o.dirty || c.Now.Sub(o.flushed) >= l.cfg.FlushEvery {
			l.flush(ctx, run.Job, o, c.Now)
		}
	}
	for job := range l.jobs {
		if !live[job] {
			delete(l.jobs, job) // given up or lost: its next owner reads the record back
		}
	}
	due := c.Now.Sub(l.lastRead) >= l.cfg.JudgeEvery || (l.readSoon && c.Now.Sub(l.lastRead) >= 5*time.Second)
	if !due {
		return nil
	}
	records, stored, err := l.readAll(ctx)
	if err != nil {
		l.log.Warn("read the fleet ledger", "err", err)
		return nil
	}
	l.lastRead, l.readSoon = c.Now, false
	l.nodeIncs = stored
	v := Aggregate(records, incidentList(stored), c.Now, l.cfg)
	var out []incident.Incident
	if c.Leader != nil {
		changes := Judge(v, stored, c.Now, l.cfg)
		if len(changes) > 0 {
			out = l.storeIncidents(ctx, *c.Leader, changes)
			if len(out) > 0 {
				v = Aggregate(records, incidentList(l.nodeIncs), c.Now, l.cfg)
			}
		}
	}
	l.setView(v)
	return out
}

func incidentList(m map[string]*NodeIncident) []*NodeIncident {
	out := make([]*NodeIncident, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

// load reads a job's record, or starts one.
func (l *Ledger) load(ctx context.Context, job string) (*JobRecord, error) {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := l.cli.Get(octx, RecordKey(job))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return NewRecord(job), nil
	}
	rec, err := DecodeRecord(resp.Kvs[0].Value)
	if err != nil {
		l.m.badRecords.Inc()
		l.log.Warn("unreadable fleet record; starting it again", "job", job, "err", err)
		return NewRecord(job), nil
	}
	return rec, nil
}

// leaseFor returns a lease of the retention, granted anew each hour: a key written last
// more than the retention ago is gone.
func (l *Ledger) leaseFor(ctx context.Context, now time.Time) (clientv3.LeaseID, error) {
	if l.lease != 0 && now.Sub(l.leaseAt) < time.Hour && now.Sub(l.leaseAt) >= 0 {
		return l.lease, nil
	}
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	g, err := l.cli.Grant(octx, int64(l.cfg.Retention.Seconds()))
	if err != nil {
		return 0, fmt.Errorf("grant the fleet lease: %w", err)
	}
	l.lease, l.leaseAt = g.ID, now
	return g.ID, nil
}

// flush writes a job's record under its fence. Refused: the job is no longer this
// replica's, and what it booked since is its successor's to book.
func (l *Ledger) flush(ctx context.Context, job string, o *ownedRecord, now time.Time) {
	o.rec.Compact(now, l.cfg.KeepRoots, l.cfg.Retention)
	b, err := o.rec.Encode()
	if err != nil {
		l.log.Warn("encode a fleet record", "job", job, "err", err)
		return
	}
	lease, err := l.leaseFor(ctx, now)
	if err != nil {
		l.m.writes.WithLabelValues("error").Inc()
		l.log.Warn("fleet record not written", "job", job, "err", err)
		return
	}
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	resp, err := l.cli.Txn(octx).If(o.fence).Then(clientv3.OpPut(RecordKey(job), string(b), clientv3.WithLease(lease))).Commit()
	cancel()
	switch {
	case err != nil:
		l.m.writes.WithLabelValues("error").Inc()
		l.log.Warn("write a fleet record", "job", job, "err", err)
	case !resp.Succeeded:
		l.m.writes.WithLabelValues("refused").Inc()
		l.log.Warn("fleet record write refused: this replica no longer owns the job", "job", job)
		delete(l.jobs, job)
	default:
		l.m.writes.WithLabelValues("ok").Inc()
		l.m.recordBytes.Observe(float64(len(b)))
		o.dirty, o.flushed = false, now
	}
}

// readAll reads every record and node incident.
func (l *Ledger) readAll(ctx context.Context) ([]*JobRecord, map[string]*NodeIncident, error) {
	octx, cancel := context.WithTimeout(ctx, 2*opTimeout)
	defer cancel()
	resp, err := l.cli.Get(octx, Prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", Prefix, err)
	}
	var records []*JobRecord
	stored := map[string]*NodeIncident{}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		switch {
		case strings.HasPrefix(key, Prefix+"jobs/"):
			rec, err := DecodeRecord(kv.Value)
			if err != nil {
				l.m.badRecords.Inc()
				continue
			}
			records = append(records, rec)
		case strings.HasPrefix(key, Prefix+"incidents/"):
			var ni NodeIncident
			if err := json.Unmarshal(kv.Value, &ni); err != nil || ni.Incident.Key == "" {
				l.m.badRecords.Inc()
				continue
			}
			k := bucket(ni.Part).Key()
			// The newest incident of a part stands for it (an older, resolved one is history).
			if prev := stored[k]; prev == nil || ni.Incident.OpenedAt.After(prev.Incident.OpenedAt) {
				stored[k] = &ni
			}
		}
	}
	sort.Slice(records, func(a, b int) bool { return records[a].Job < records[b].Job })
	return records, stored, nil
}

// storeIncidents writes node incident changes under the leader's fence (opening ones
// after their opt-in actions ran) and returns the stored ones as incidents.
func (l *Ledger) storeIncidents(ctx context.Context, fence clientv3.Cmp, changes []*NodeIncident) []incident.Incident {
	lease, err := l.leaseFor(ctx, time.Now())
	if err != nil {
		l.log.Warn("node incidents not stored", "err", err)
		return nil
	}
	var out []incident.Incident
	for start := 0; start < len(changes); start += 64 {
		chunk := changes[start:min(start+64, len(changes))]
		ops := make([]clientv3.Op, 0, len(chunk))
		for _, ni := range chunk {
			if ni.Incident.Revision == 1 {
				Apply(ctx, ni, l.cfg.Actions)
				ni.Incident.Evidence = append(ni.Incident.Evidence[:len(ni.Incident.Evidence)-len(ni.Actions)], actionLines(ni.Actions)...)
			}
			b, err := json.Marshal(ni)
			if err != nil {
				continue
			}
			ops = append(ops, clientv3.OpPut(IncidentKey(ni.Incident.ID), string(b), clientv3.WithLease(lease)))
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		resp, err := l.cli.Txn(octx).If(fence).Then(ops...).Commit()
		cancel()
		switch {
		case err != nil:
			l.m.writes.WithLabelValues("error").Inc()
			l.log.Warn("store node incidents", "err", err)
			return out
		case !resp.Succeeded:
			l.m.writes.WithLabelValues("refused").Inc()
			l.log.Warn("node incident write refused: this replica no longer leads")
			return out
		}
		l.m.writes.WithLabelValues("ok").Inc()
		for _, ni := range chunk {
			l.nodeIncs[bucket(ni.Part).Key()] = ni
			out = append(out, ni.Incident)
			if ni.Incident.Revision == 1 {
				l.log.Warn("node incident opened", "id", ni.Incident.ID, "part", ni.Part.Key(), "summary", ni.Incident.Summary)
			} else if ni.Incident.State == incident.StateResolved {
				l.log.Info("node incident resolved", "id", ni.Incident.ID, "part", ni.Part.Key())
			}
		}
	}
	return out
}

func (l *Ledger) setView(v *View) {
	l.m.set(v, l.cfg.TopN)
	l.mu.Lock()
	l.view, l.viewAt = v, v.At
	l.mu.Unlock()
}

// View returns the fleet's view, read from etcd unless the last one is less than a
// second old (the API and `watchdog status --nodes` poll it).
func (l *Ledger) View(ctx context.Context, now time.Time) (*View, error) {
	l.mu.Lock()
	v, at := l.view, l.viewAt
	l.mu.Unlock()
	if v != nil && now.Sub(at) < time.Second && now.Sub(at) >= 0 {
		return v, nil
	}
	records, stored, err := l.readAll(ctx)
	if err != nil {
		if v != nil {
			return v, nil
		}
		return nil, err
	}
	v = Aggregate(records, incidentList(stored), now, l.cfg)
	l.mu.Lock()
	l.view, l.viewAt = v, now
	l.mu.Unlock()
	return v, nil
}

// ErrNoLedger is returned by the API when the detector runs without a fleet ledger.
var ErrNoLedger = errors.New("the detector keeps no fleet ledger")
