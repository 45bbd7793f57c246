package live

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/ncclwatch/watchdog/detect/fleet"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdfence"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Fleet books the roots of the jobs this replica owns across jobs and time, and judges
// node incidents while it leads (detect/fleet.Ledger). It sees the detector's output only:
// the owned jobs with their fences and nodes, and their incidents as stored.
type Fleet interface {
	// Due says whether a cycle is worth handing over: sig changes with the owned jobs'
	// incidents; otherwise the ledger wants one now and then (exposure, judging).
	Due(now time.Time, sig int64) bool
	Observe(ctx context.Context, c fleet.Cycle) []incident.Incident
}

// observeFleet hands the fleet ledger the owned jobs and their stored incidents, and
// announces the node incidents it stored. The jobs' nodes are listed only when the ledger
// wants a cycle, so that a job of thousands of nodes costs nothing in between.
func (d *Detector) observeFleet(ctx context.Context, alerts Alerts) {
	if d.opts.Fleet == nil {
		return
	}
	now := d.opts.Now()
	d.mu.Lock()
	var sig int64
	for _, inc := range d.incidents {
		if d.owned[inc.Job] != nil {
			sig += int64(inc.Revision)*31 + int64(len(inc.ID))
		}
	}
	sig += int64(len(d.owned)) << 32
	if !d.opts.Fleet.Due(now, sig) {
		d.mu.Unlock()
		return
	}
	c := fleet.Cycle{Now: now}
	for job, o := range d.owned {
		run := fleet.JobRun{Job: job, Fence: etcdfence.KeyAt(snapshot.OwnerKey(job), o.rev), Term: o.rev,
			Places: fleet.Places{Nodes: map[string]string{}, GPUs: map[string]string{}}}
		if j := d.state.jobs[job]; j != nil {
			for name, ns := range j.nodes {
				if ns.snap == nil || !ns.lostAt.IsZero() || ns.stopped {
					continue
				}
				run.Nodes = append(run.Nodes, name)
				for _, p := range ns.snap.Processes {
					run.Places.Nodes[p.Host] = name
					if p.BusID != "" {
						run.Places.GPUs[p.Host+":"+strconv.Itoa(p.PID)] = p.BusID
					}
				}
			}
		}
		c.Jobs = append(c.Jobs, run)
	}
	for _, inc := range d.incidents {
		if d.owned[inc.Job] != nil {
			c.Incidents = append(c.Incidents, inc)
		}
	}
	if d.leader && d.leaderKey != "" {
		cmp := etcdfence.KeyAt(d.leaderKey, d.leaderRev)
		c.Leader = &cmp
	}
	d.mu.Unlock()
	for _, inc := range d.opts.Fleet.Observe(ctx, c) {
		d.announce(inc, alerts)
	}
}

// FleetHandler serves the fleet view (GET /api/v1/nodes) when the detector keeps a fleet
// ledger that serves one; 404 otherwise.
func (d *Detector) FleetHandler() http.Handler {
	if h, ok := d.opts.Fleet.(http.Handler); ok {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "this detector keeps no fleet ledger", http.StatusNotFound)
	})
}
