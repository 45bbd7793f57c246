// Package fleetsim measures the fleet ledger at fleet scale: a cluster of nodes, jobs
// placed by a simple scheduler (first come, first served with backfill, random free
// nodes), a few bad parts (a slow NIC, a throttling GPU, a flaky host) and background
// trouble on every node that is no node's fault (a job's slow rank 0, one-off stalls,
// transient throttles and link flaps, application errors). Each job's incidents are what
// the detector's engine would store for it (kind, cause, culprits, lost time); they go
// through the real fleet ledger on a real etcd, under the same fences as a detector's, on
// a simulated clock. It reports how many jobs and hours it took to name each bad part,
// and every node incident on a part that was not bad.
package fleetsim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/detect/fleet"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdfence"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Config sizes a simulation; zero fields take the defaults.
type Config struct {
	Nodes int   // default 1,000
	Jobs  int   // default 100
	Seed  int64 // default 1
	// Step is the simulated time between two cycles (default 10 min).
	Step time.Duration
	// Fleet is the ledger's configuration (its defaults, JudgeEvery one hour).
	Fleet fleet.Config
	// Drain: the scheduler stops placing jobs on a node once a node incident names it.
	Drain  bool
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Nodes <= 0 {
		c.Nodes = 1000
	}
	if c.Jobs <= 0 {
		c.Jobs = 100
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Step <= 0 {
		c.Step = 10 * time.Minute
	}
	if c.Fleet.JudgeEvery <= 0 {
		c.Fleet.JudgeEvery = time.Hour
	}
	if c.Fleet.FlushEvery <= 0 {
		c.Fleet.FlushEvery = time.Hour
	}
	if c.Fleet.MaxGap <= 0 {
		c.Fleet.MaxGap = 2 * c.Step
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// BadPart is one planted fault and when the ledger named it.
type BadPart struct {
	What string     `json:"what"` // slow NIC, throttling GPU, flaky host
	Part fleet.Part `json:"part"`
	// Named says a node incident named the part; NamedAfterHours is the simulated time
	// from the start (the part was bad from the start), NamedAfterJobs how many jobs had
	// run on its node by then, RootedJobs in how many of them it was a root (never named:
	// the jobs and roots of the whole run).
	Named           bool    `json:"named"`
	NamedAfterHours float64 `json:"named_after_hours"`
	NamedAfterJobs  int     `json:"named_after_jobs"`
	RootedJobs      int     `json:"rooted_jobs"`
	Incident        string  `json:"incident,omitempty"`
}

// Result is what a simulation measured.
type Result struct {
	Nodes     int `json:"nodes"`
	Jobs      int `json:"jobs"`
	JobsRun   int `json:"jobs_run"`
	BusyNodes int `json:"nodes_that_ran_jobs"`
	// SimHours is the simulated time until every job ended.
	SimHours      float64 `json:"sim_hours"`
	JobHours      float64 `json:"job_hours"`
	Incidents     int     `json:"incidents"`
	NoiseRoots    int     `json:"noise_incidents"`
	BadPartRoots  int     `json:"bad_part_incidents"`
	BadParts      []BadPart
	NodeIncidents int `json:"node_incidents"`
	// FalseNodeIncidents are node incidents on parts that were not bad.
	FalseNodeIncidents int      `json:"false_node_incidents"`
	FalseParts         []string `json:"false_parts,omitempty"`
	LedgerKeys         int64    `json:"ledger_keys"`
	LedgerBytes        int      `json:"ledger_bytes"`
	WallSeconds        float64  `json:"wall_seconds"`
}

type job struct {
	name      string
	size      int
	hours     float64
	nodes     []string
	start     time.Time
	end       time.Time
	incidents []incident.Incident
	fence     clientv3.Cmp
	term      int64
	lease     clientv3.LeaseID
}

// Fault rates: per job-hour of a job that runs on the bad part's node; in the background,
// per job-hour of every job (its own trouble) or per node-hour (transient hardware trouble
// on good nodes): what the simulated engine stores.
const (
	slowNICRate     = 0.25 // a link slowdown episode whenever traffic crosses it
	throttleRate    = 0.25 // a throttling episode
	flakyHostRate   = 0.08 // the host drops out about twice a day
	appSlowRate     = 0.10 // the job's own rank 0 is slow (input pipeline, logging)
	stallRate       = 0.02 // a one-off host stall (checkpoint I/O) on a random node
	transientGPU    = 3e-4 // a transient throttle of a good GPU, per node-hour
	linkFlapRate    = 3e-4 // a link flap from a good node to a peer, per node-hour
	appErrorRate    = 0.02 // the application's own error (never a node's)
	maxJobIncidents = 64   // incidents a job keeps (the detector resolves and forgets the rest)
)

// Run simulates on cli (a real etcd) until every job ended.
func Run(ctx context.Context, cli *clientv3.Client, cfg Config) (*Result, error) {
	cfg.defaults()
	began := time.Now()
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed))
	t0 := time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC)
	now := t0
	nodes := make([]string, cfg.Nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%04d", i)
	}
	// Three bad parts on three different random nodes.
	perm := rng.Perm(cfg.Nodes)
	nicNode, gpuNode, hostNode := nodes[perm[0]], nodes[perm[1]], nodes[perm[2]]
	bad := []BadPart{
		{What: "slow NIC", Part: fleet.Part{Kind: fleet.PartNIC, Node: nicNode, ID: "mlx5_2:1"}},
		{What: "throttling GPU", Part: fleet.Part{Kind: fleet.PartGPU, Node: gpuNode, ID: "9d000"}},
		{What: "flaky host", Part: fleet.Part{Kind: fleet.PartHost, Node: hostNode}},
	}
	// The queue: sizes from 8 to 128 nodes, 4 to 48 hours.
	sizes := []int{8, 8, 16, 16, 32, 32, 64, 128}
	var queue []*job
	for i := 0; i < cfg.Jobs; i++ {
		queue = append(queue, &job{name: fmt.Sprintf("job-%03d", i), size: sizes[rng.IntN(len(sizes))], hours: 4 + 44*rng.Float64()})
	}
	ledger := fleet.New(cli, cfg.Fleet, fleet.Options{Logger: cfg.Logger})
	leaderKey := snapshot.LeaderKey + "/fleetsim"
	put, err := cli.Put(ctx, leaderKey, "fleetsim")
	if err != nil {
		return nil, fmt.Errorf("fleetsim: %w", err)
	}
	leader := etcdfence.KeyAt(leaderKey, put.Header.Revision)

	res := &Result{Nodes: cfg.Nodes, Jobs: cfg.Jobs}
	busy := map[string]*job{}
	drained := map[string]bool{}
	ranOn := map[string]map[string]bool{}  // node -> jobs that ran there
	rooted := map[string]map[string]bool{} // bad part key -> jobs it was a root in
	var running []*job
	seq := 0
	newIncident := func(j *job, kind incident.Kind, cause incident.Cause, lost time.Duration, culprits ...incident.Culprit) incident.Incident {
		seq++
		at := now.Add(-time.Duration(rng.Int64N(int64(cfg.Step))))
		end := at.Add(lost)
		inc := incident.Incident{ID: fmt.Sprintf("%s-%d", j.name, seq), Key: fmt.Sprintf("k%d", seq), Kind: kind, Cause: cause,
			State: incident.StateResolved, Severity: incident.SeverityWarning, Job: j.name, Culprits: culprits, OpenedAt: at.Add(10 * time.Second),
			FaultAt: at, LastSeen: end, ResolvedAt: &end, Revision: 2, Episode: &incident.Episode{Onset: at, End: end, Lost: lost}}
		res.Incidents++
		return inc
	}
	happens := func(perHour float64) bool { return rng.Float64() < perHour*cfg.Step.Hours() }
	lostTime := func() time.Duration { return time.Duration(2+rng.IntN(20)) * time.Minute }

	for (len(queue) > 0 || len(running) > 0) && ctx.Err() == nil {
		// End jobs that are done; release their ownership.
		kept := running[:0]
		for _, j := range running {
			if now.Before(j.end) {
				kept = append(kept, j)
				continue
			}
			for _, n := range j.nodes {
				delete(busy, n)
			}
			if _, err := cli.Revoke(ctx, j.lease); err != nil {
				return nil, fmt.Errorf("fleetsim: end %s: %w", j.name, err)
			}
		}
		running = kept
		// Schedule: in queue order, each job that fits now (backfill), on random free nodes.
		var free []string
		for _, n := range nodes {
			if busy[n] == nil && !drained[n] {
				free = append(free, n)
			}
		}
		rest := queue[:0]
		for _, j := range queue {
			if j.size > len(free) {
				rest = append(rest, j)
				continue
			}
			rng.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
			j.nodes = append([]string(nil), free[:j.size]...)
			sort.Strings(j.nodes)
			free = free[j.size:]
			j.start, j.end = now, now.Add(time.Duration(j.hours*float64(time.Hour)))
			if err := own(ctx, cli, j); err != nil {
				return nil, err
			}
			for _, n := range j.nodes {
				busy[n] = j
				if ranOn[n] == nil {
					ranOn[n] = map[string]bool{}
				}
				ranOn[n][j.name] = true
			}
			running = append(running, j)
			res.JobsRun++
			res.JobHours += j.hours * float64(j.size)
		}
		queue = rest

		// What each running job's engine stores this step.
		for _, j := range running {
			has := func(n string) bool { return busy[n] == j }
			peer := func(not string) string {
				for {
					if p := j.nodes[rng.IntN(len(j.nodes))]; p != not || len(j.nodes) == 1 {
						return p
					}
				}
			}
			var incs []incident.Incident
			if has(nicNode) && happens(slowNICRate) {
				if rng.IntN(2) == 0 { // the IB port counters name the port
					incs = append(incs, newIncident(j, incident.KindLink, incident.CauseLink, lostTime(),
						incident.Culprit{Rank: -1, Host: nicNode, Port: "mlx5_2:1"}))
				} else { // the transfers to one peer lag: a link between two hosts
					incs = append(incs, newIncident(j, incident.KindStraggler, incident.CauseLink, lostTime(),
						incident.Culprit{Rank: 8, Host: nicNode}, incident.Culprit{Rank: 16, Host: peer(nicNode)}))
				}
				markRooted(rooted, bad[0].Part, j.name)
				res.BadPartRoots++
			}
			if has(gpuNode) && happens(throttleRate) {
				incs = append(incs, newIncident(j, incident.KindStraggler, incident.CauseGPUThrottled, lostTime(),
					incident.Culprit{Rank: 3, Host: gpuNode, GPU: "3 (bus 9d000)"}))
				markRooted(rooted, bad[1].Part, j.name)
				res.BadPartRoots++
			}
			if has(hostNode) && happens(flakyHostRate) {
				incs = append(incs, newIncident(j, incident.KindLostNode, incident.CauseDied, time.Duration(10+rng.IntN(30))*time.Minute,
					incident.Culprit{Rank: -1, Host: hostNode}))
				markRooted(rooted, bad[2].Part, j.name)
				res.BadPartRoots++
			}
			// Background trouble: no node's fault.
			if happens(appSlowRate) {
				incs = append(incs, newIncident(j, incident.KindStraggler, incident.CauseHostSlow, lostTime(), incident.Culprit{Rank: 0, Host: j.nodes[0]}))
				res.NoiseRoots++
			}
			if happens(stallRate) {
				incs = append(incs, newIncident(j, incident.KindHang, incident.CauseHostStalled, lostTime(),
					incident.Culprit{Rank: 1, Host: j.nodes[rng.IntN(len(j.nodes))]}))
				res.NoiseRoots++
			}
			for _, n := range j.nodes {
				if happens(transientGPU) {
					incs = append(incs, newIncident(j, incident.KindStraggler, incident.CauseGPUThrottled, lostTime(),
						incident.Culprit{Rank: 2, Host: n, GPU: fmt.Sprintf("%d (bus %x000)", rng.IntN(8), 0x18+rng.IntN(8))}))
					res.NoiseRoots++
				}
				if happens(linkFlapRate) {
					incs = append(incs, newIncident(j, incident.KindStraggler, incident.CauseLink, lostTime(),
						incident.Culprit{Rank: 4, Host: n}, incident.Culprit{Rank: 5, Host: peer(n)}))
					res.NoiseRoots++
				}
			}
			if happens(appErrorRate) {
				incs = append(incs, newIncident(j, incident.KindCrash, incident.CauseApplication, lostTime(), incident.Culprit{Rank: 0, Host: j.nodes[0]}))
				res.NoiseRoots++
			}
			j.incidents = append(j.incidents, incs...)
			if n := len(j.incidents) - maxJobIncidents; n > 0 {
				j.incidents = append(j.incidents[:0], j.incidents[n:]...)
			}
		}

		// The cycle the detector hands the ledger.
		c := fleet.Cycle{Now: now, Leader: &leader}
		for _, j := range running {
			c.Jobs = append(c.Jobs, fleet.JobRun{Job: j.name, Nodes: j.nodes, Fence: j.fence, Term: j.term})
			c.Incidents = append(c.Incidents, j.incidents...)
		}
		for _, inc := range ledger.Observe(ctx, c) {
			if inc.Kind != incident.KindNode || inc.Revision != 1 {
				continue
			}
			res.NodeIncidents++
			node := inc.Culprits[0].Host
			if cfg.Drain {
				drained[node] = true
			}
			matched := false
			for i := range bad {
				b := &bad[i]
				if !names(inc, b.Part) {
					continue
				}
				matched = true // a NIC is named by its port and by its node's links alike
				if b.Named {
					continue
				}
				b.Named, b.Incident = true, inc.ID
				b.NamedAfterHours = now.Sub(t0).Hours()
				b.NamedAfterJobs = len(ranOn[b.Part.Node])
				b.RootedJobs = len(rooted[b.Part.Key()])
			}
			if !matched {
				res.FalseNodeIncidents++
				res.FalseParts = append(res.FalseParts, inc.Key+": "+inc.Summary+" | "+strings.Join(inc.Evidence, " | "))
			}
		}
		now = now.Add(cfg.Step)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.SimHours = now.Sub(t0).Hours()
	for i := range bad {
		if b := &bad[i]; !b.Named {
			b.NamedAfterJobs, b.RootedJobs = len(ranOn[b.Part.Node]), len(rooted[b.Part.Key()])
		}
	}
	res.BadParts = bad
	res.BusyNodes = len(ranOn)
	resp, err := cli.Get(ctx, fleet.Prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("fleetsim: %w", err)
	}
	res.LedgerKeys = resp.Count
	for _, kv := range resp.Kvs {
		res.LedgerBytes += len(kv.Value)
	}
	res.WallSeconds = time.Since(began).Seconds()
	return res, nil
}

// names says whether a node incident names the bad part: its node, and the part itself
// (a NIC is also named by its node's links failing with several peers).
func names(inc incident.Incident, p fleet.Part) bool {
	c := inc.Culprits[0]
	if c.Host != p.Node {
		return false
	}
	switch p.Kind {
	case fleet.PartGPU:
		return c.GPU == p.ID
	case fleet.PartNIC:
		return c.Port == p.ID || inc.Key == "node:link:"+p.Node
	}
	return inc.Key == "node:host:"+p.Node
}

func markRooted(m map[string]map[string]bool, p fleet.Part, job string) {
	if m[p.Key()] == nil {
		m[p.Key()] = map[string]bool{}
	}
	m[p.Key()][job] = true
}

// own claims a job as a detector replica does: its owner key under a lease, created only
// if absent; the create revision is the fence of its ledger writes.
func own(ctx context.Context, cli *clientv3.Client, j *job) error {
	g, err := cli.Grant(ctx, 3600)
	if err != nil {
		return fmt.Errorf("fleetsim: %w", err)
	}
	key := snapshot.OwnerKey(j.name)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "fleetsim", clientv3.WithLease(g.ID))).Commit()
	if err != nil {
		return fmt.Errorf("fleetsim: claim %s: %w", j.name, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("fleetsim: %s is owned already", j.name)
	}
	j.lease, j.term = g.ID, resp.Header.Revision
	j.fence = etcdfence.KeyAt(key, j.term)
	return nil
}
