package detect

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TeardownConfig says when deaths are a job's teardown: two or more dying within
// TeardownWindow, of at least TeardownFraction of its ranks or of its hosts (a launcher's
// log may name one dead rank per node). When a job is killed (after a hang, by the launcher
// after one rank failed, by the scheduler), every rank dies within a second or two; those
// deaths are one event, not one crash per rank. Like LostConfig, no YAML keys.
type TeardownConfig struct {
	TeardownWindow   time.Duration `yaml:"-"`
	TeardownFraction float64       `yaml:"-"`
}

// Crash finds dead rank processes: an exited process whose communicators were not all
// destroyed, a peer's "Connection closed by localRank N", the launcher's failure line. A
// process that died after PyTorch timed it out while it only waited is a consequence, not a
// root cause, and is not reported; nor is one that the launcher reported exiting with 0.
func Crash(j *Job, cfg Config) []Finding {
	type death struct {
		proc     *Proc
		evidence []string
		when     int64
		// strong is set when something says the process failed (an exit code, an exit
		// with communicators in use); its peers' closed connections alone are also what a
		// job that ends looks like.
		strong bool
		// reported: a peer or the launcher said it failed, beyond its exit alone.
		reported bool
	}
	died := map[string]*death{}
	// launched are the deaths the launcher named: the first worker it saw fail on a node.
	launched := map[string]bool{}
	var order []string
	note := func(p *Proc, when int64, strong, reported bool, format string, args ...any) {
		k := p.Key()
		d := died[k]
		if d == nil {
			d = &death{proc: p}
			died[k] = d
			order = append(order, k)
		}
		d.strong = d.strong || strong
		d.reported = d.reported || reported
		if when != 0 && (d.when == 0 || when < d.when) {
			d.when = when
		}
		if len(d.evidence) < 12 {
			d.evidence = append(d.evidence, fmt.Sprintf(format, args...))
		}
	}
	byHostLocal := map[string]*Proc{}
	missing := map[string]*Proc{}
	byPID := map[int][]*Proc{}
	for _, p := range j.Procs {
		if local := localOf(j, p); local >= 0 {
			byHostLocal[p.Host+"/"+strconv.Itoa(local)] = p
		}
		byPID[p.PID] = append(byPID[p.PID], p)
	}
	for _, p := range j.Procs {
		if p.State == snapshot.ProcExited && !cleanExit(p) && !launchedClean(p) {
			note(p, int64(p.ExitedAt), true, false, "the process exited at %s with communicators still in use", fmtTime(p.ExitedAt.Time()))
		}
		for _, e := range p.Events {
			if !recentEvent(j, cfg.EventConfig, int64(e.T)) {
				continue
			}
			switch e.Kind {
			case snapshot.EventConnClosedLocal:
				lr := e.LocalRank
				if lr < 0 {
					// "localRank -1": a connection that never said who it was (a port
					// scanner, a stray client), not a rank of the job.
					continue
				}
				dead := byHostLocal[p.Host+"/"+strconv.Itoa(lr)]
				if dead == nil {
					// The survivors name a local rank whose own log is not here: it died
					// all the same; it is known by its host and local rank.
					k := p.Host + "/" + strconv.Itoa(lr)
					if dead = missing[k]; dead == nil {
						dead = missingLocal(j, p.Host, lr)
						missing[k] = dead
					}
				}
				if dead != p {
					note(dead, int64(e.T), !j.Offline, true, "%s logged \"Connection closed by localRank %d\": the proxy connection to this process broke", p.Name(), lr)
				}
			case snapshot.EventLauncherExit:
				if e.Code == 0 {
					continue
				}
				pid := e.PID
				deadOnes := byPID[pid]
				if len(deadOnes) == 0 {
					// Its NCCL log is missing: the local rank its peers named dead, or on a
					// job of one host, that host's local rank.
					if dead := launchedLocal(j, missing, e.LocalRank); dead != nil {
						deadOnes = []*Proc{dead}
					}
				}
				for _, dead := range deadOnes {
					launched[dead.Key()] = true
					note(dead, int64(e.T), true, true, "the launcher reported local_rank %d (pid %d) failed with exit code %d%s", e.LocalRank, pid, e.Code, exitWords(e.Code))
				}
			}
		}
	}
	if len(order) == 0 {
		return nil
	}
	ix := memberships(j)
	// launchedOn is the death on host the launcher named, nil when none or several.
	launchedOn := func(host string) *death {
		var found *death
		for k := range launched {
			if d := died[k]; d != nil && d.proc.Host == host {
				if found != nil && found != d {
					return nil
				}
				found = d
			}
		}
		return found
	}
	var out []Finding
	failed := failureSeen(j)
	why := &deaths{j: j}
	for _, k := range order {
		d := died[k]
		if timedOutItself(d.proc) || (!d.strong && !launched[k] && timedOutRank(j, d.proc)) {
			continue
		}
		if first := launchedOn(d.proc.Host); first != nil && !d.strong && !launched[k] {
			// The launcher stops the other workers of a node once one fails; their
			// closed connections are that teardown, and the one it named is the cause.
			first.evidence = append(first.evidence, fmt.Sprintf("then %s closed its connections (the launcher stops the other workers once one fails)", d.proc.Name()))
			continue
		}
		if !d.strong && !failed && ix.mostBehind(d.proc) == nil {
			// Offline, the survivors of a job that ended print the same closures.
			continue
		}
		p := d.proc
		f := Finding{Kind: incident.KindCrash, Severity: incident.SeverityCritical,
			Culprits: []incident.Culprit{p.Culprit()}, culpritKeys: []string{k}, Key: "rank:" + k}
		f.Summary = fmt.Sprintf("%s died", p.Name())
		if c := ix.mostBehind(p); c != nil {
			peer := c.leader
			f.Comm, f.Seq = c.group.ID, c.member.Comm.Count+1
			f.Summary += fmt.Sprintf(" after position %d of communicator %s (%s is at %d)",
				c.member.Comm.Count, shortComm(c.group.ID), peer.Proc.Name(), peer.Comm.Count)
			f.Victims = len(c.group.Members) - 1
		} else if g := ix.firstGroup(p); g != nil {
			f.Comm = g.ID
			f.Victims = len(g.Members) - 1
		}
		for _, e := range d.evidence {
			f.addEvidence("%s", e)
		}
		if reason := why.reason(p); reason != "" {
			f.Summary += ": " + reason
		}
		f.Cause = incident.CauseDied
		f.witness = why.blamesPeer(p)
		if d.when != 0 {
			f.FaultAt = snapshot.Micros(d.when).Time()
		}
		if p.LastLine != 0 && j.Offline {
			f.addEvidence("its log has %d lines and stops there", p.Lines)
		}
		processEvidence(j, p, &f)
		f.exitOnly = !d.reported
		out = append(out, f)
	}
	return out
}

// launchedClean: the launcher reported the process exiting with status 0: it finished,
// whether or not it destroyed its communicators first.
func launchedClean(p *Proc) bool {
	for _, e := range p.Events {
		if e.Kind == snapshot.EventLauncherExit && e.Code == 0 && e.PID == p.PID {
			return true
		}
	}
	return false
}

// localOf is a process's local rank: from its comm info line, else its CUDA device when
// its host's processes each have their own (launchers give local rank N the GPU N).
func localOf(j *Job, p *Proc) int {
	if p.LocalRank >= 0 || p.CudaDev < 0 || p.Host == "" {
		return p.LocalRank
	}
	for _, q := range j.Procs {
		if q != p && q.Host == p.Host && q.CudaDev == p.CudaDev {
			return -1
		}
	}
	return p.CudaDev
}

// launchedLocal finds the process a launcher's failure line means by its local rank when
// no log has its pid: one already known dead from its peers, else the local rank of the
// job's only host.
func launchedLocal(j *Job, missing map[string]*Proc, local int) *Proc {
	var found *Proc
	for _, p := range missing {
		if p.LocalRank == local {
			if found != nil {
				return nil
			}
			found = p
		}
	}
	if found != nil {
		return found
	}
	hosts := map[string]bool{}
	for _, p := range j.Procs {
		if p.Host != "" && p.Host != "?" {
			hosts[p.Host] = true
		}
	}
	if len(hosts) != 1 {
		return nil
	}
	for h := range hosts {
		for _, p := range j.Procs {
			if p.Host == h && p.LocalRank == local {
				return p
			}
		}
		found = missingLocal(j, h, local)
		missing[h+"/"+strconv.Itoa(local)] = found
	}
	return found
}

// exitWords says what a launcher's exit code means: a negative code is the signal that
// killed the process.
func exitWords(code int) string {
	switch code {
	case -9:
		return " (SIGKILL: the out-of-memory killer, the scheduler or a user killed it)"
	case -6:
		return " (SIGABRT: it aborted itself, e.g. PyTorch's watchdog after an NCCL error or timeout)"
	case -11:
		return " (SIGSEGV: it crashed)"
	case -7:
		return " (SIGBUS: often /dev/shm exhausted)"
	case -15:
		return " (SIGTERM: stopped from outside, often by the launcher after another rank failed)"
	}
	return ""
}

// missingLocal stands for a process whose log is missing, known from its host and local
// rank; its global rank follows from the host's other ranks when they are numbered
// contiguously (rank = first rank of the host + local rank, the local rank read from the
// comm info line or else the CUDA device), else it stays unknown.
func missingLocal(j *Job, host string, local int) *Proc {
	base, ok := -1, true
	for _, p := range j.Procs {
		local := p.LocalRank
		if local < 0 {
			// Launchers give local rank N the GPU N: its device stands in.
			local = p.CudaDev
		}
		if p.Host != host || p.Rank < 0 || local < 0 {
			continue
		}
		if b := p.Rank - local; base < 0 {
			base = b
		} else if b != base {
			ok = false
		}
	}
	rank := -1
	if ok && base >= 0 {
		rank = base + local
	}
	return &Proc{Process: snapshot.Process{Host: host, PID: -1 - local, Rank: rank, LocalRank: local, CudaDev: -1,
		File: "(no log)"}, Node: host}
}

// cleanExit: a process that destroyed all its communicators finished normally.
func cleanExit(p *Proc) bool {
	if p.Plugin != nil && p.Plugin.Finalized {
		return true
	}
	if len(p.Comms) == 0 {
		return false
	}
	for _, c := range p.Comms {
		if c.State != snapshot.CommDestroyed {
			return false
		}
	}
	return true
}

// timedOutItself reports whether PyTorch's watchdog timed this process out: then it was
// waiting on someone else, and its death is the watchdog's reaction.
func timedOutItself(p *Proc) bool {
	for _, e := range p.Events {
		if e.Kind == snapshot.EventTorchTimeout {
			return true
		}
	}
	return false
}

// timedOutRank reports whether PyTorch's watchdog timed out (or NCCL aborted) the rank that
// a dead process, known only from its peers' closed connections, stands for: PyTorch aborts a
// timed-out rank's communicators, and the other ranks of its host see its proxy connection
// close. That is the teardown of a hang, not a death.
func timedOutRank(j *Job, dead *Proc) bool {
	hung := false
	for _, p := range j.Procs {
		hung = hung || timedOutItself(p)
	}
	if !hung {
		return false
	}
	if aborted(dead) {
		return true
	}
	rank := dead.Rank
	if rank < 0 && localOf(j, dead) >= 0 && localOf(j, dead) < oneHostWorld(j, dead.Host) {
		rank = localOf(j, dead)
	}
	if rank < 0 {
		return false
	}
	for _, p := range j.Procs {
		if p != dead && p.Rank == rank && (timedOutItself(p) || aborted(p)) {
			return true
		}
	}
	return false
}

// aborted: the process aborted a communicator itself (NCCL's abort lines, PyTorch's
// watchdog failing a work): it was alive, tearing down.
func aborted(p *Proc) bool {
	for _, e := range p.Events {
		if e.Kind == snapshot.EventCommAbort || (e.Kind == snapshot.EventTorchWorkStatus && e.Fatal) {
			return true
		}
	}
	return false
}

// oneHostWorld is the number of local ranks of host when the job is that one node:
// every NCCL process of the job runs on host, none numbered by NCCL or the launcher, and the
// ranks PyTorch names fit in its local ranks, which are then the global ranks; else 0.
func oneHostWorld(j *Job, host string) int {
	locals := 0
	for _, q := range j.Procs {
		switch {
		case q.Host == "?" || q.Host == "":
		case q.Host != host || q.Rank >= 0:
			return 0
		case localOf(j, q) >= 0:
			locals = max(locals, localOf(j, q)+1)
		}
	}
	for _, q := range j.Procs {
		if (q.Host == "?" || q.Host == "") && q.Rank >= locals {
			return 0
		}
	}
	return locals
}

// teardown is the deaths of a job's teardown: indexes into the crash findings, earliest
// first, and when the first and the last died.
type teardown struct {
	deaths      []int
	first, last time.Time
	hosts       int
}

// teardownOf finds the largest set of deaths within TeardownWindow (the earliest such set)
// and says whether it is a teardown.
func teardownOf(j *Job, crashes []Finding, cfg TeardownConfig) (teardown, bool) {
	var timed []int
	for i := range crashes {
		if !crashes[i].FaultAt.IsZero() {
			timed = append(timed, i)
		}
	}
	sort.SliceStable(timed, func(a, b int) bool {
		fa, fb := &crashes[timed[a]], &crashes[timed[b]]
		if !fa.FaultAt.Equal(fb.FaultAt) {
			return fa.FaultAt.Before(fb.FaultAt)
		}
		return firstRank(fa) < firstRank(fb)
	})
	bestLo, bestN := 0, 0
	for lo, hi := 0, 0; hi < len(timed); hi++ {
		for crashes[timed[hi]].FaultAt.Sub(crashes[timed[lo]].FaultAt) > cfg.TeardownWindow {
			lo++
		}
		if n := hi - lo + 1; n > bestN {
			bestLo, bestN = lo, n
		}
	}
	if bestN < 2 {
		return teardown{}, false
	}
	t := teardown{deaths: timed[bestLo : bestLo+bestN]}
	t.first, t.last = crashes[t.deaths[0]].FaultAt, crashes[t.deaths[bestN-1]].FaultAt
	hosts, dead := map[string]bool{}, map[string]bool{}
	for _, p := range j.Procs {
		hosts[p.Host] = true
	}
	for _, i := range t.deaths {
		for _, c := range crashes[i].Culprits {
			dead[c.Host] = true
		}
	}
	t.hosts = len(dead)
	most := func(n, of int) bool { return float64(n) >= cfg.TeardownFraction*float64(of) }
	return t, most(bestN, len(j.Procs)) || most(len(dead), len(hosts))
}

func firstRank(f *Finding) int {
	if len(f.Culprits) == 0 {
		return math.MaxInt
	}
	return f.Culprits[0].Rank
}

// jobOneHostWorld is oneHostWorld of the job's only NCCL host, 0 when it has none or several.
func jobOneHostWorld(j *Job) int {
	for _, p := range j.Procs {
		if p.Host != "?" && p.Host != "" {
			return oneHostWorld(j, p.Host)
		}
	}
	return 0
}
