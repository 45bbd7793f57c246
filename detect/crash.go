package detect

import (
	"fmt"
	"strconv"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Crash finds dead rank processes: an exited process whose communicators were not all
// destroyed, a peer's "Connection closed by localRank N", the launcher's failure line. A
// process that died after PyTorch timed it out while it only waited is a consequence, not a
// root cause, and is not reported.
func Crash(j *Job, cfg Config) []Finding {
	type death struct {
		proc     *Proc
		evidence []string
		when     int64
	}
	deaths := map[string]*death{}
	var order []string
	note := func(p *Proc, when int64, format string, args ...any) {
		k := p.Key()
		d := deaths[k]
		if d == nil {
			d = &death{proc: p}
			deaths[k] = d
			order = append(order, k)
		}
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
		if p.LocalRank >= 0 {
			byHostLocal[p.Host+"/"+strconv.Itoa(p.LocalRank)] = p
		}
		byPID[p.PID] = append(byPID[p.PID], p)
	}
	for _, p := range j.Procs {
		if p.State == snapshot.ProcExited && !cleanExit(p) {
			note(p, int64(p.ExitedAt), "the process exited at %s with communicators still in use", fmtTime(p.ExitedAt.Time()))
		}
		for _, e := range p.Events {
			if !recentEvent(j, cfg.EventConfig, int64(e.T)) {
				continue
			}
			switch e.Kind {
			case snapshot.EventConnClosedLocal:
				lr := e.LocalRank
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
					note(dead, int64(e.T), "%s logged \"Connection closed by localRank %d\": the proxy connection to this process broke", p.Name(), lr)
				}
			case snapshot.EventLauncherExit:
				pid := e.PID
				for _, dead := range byPID[pid] {
					if e.Code != 0 {
						note(dead, int64(e.T), "the launcher reported local_rank %d (pid %d) failed with exit code %d", e.LocalRank, pid, e.Code)
					}
				}
			}
		}
	}
	var out []Finding
	for _, k := range order {
		d := deaths[k]
		if timedOutItself(d.proc) {
			continue
		}
		p := d.proc
		f := Finding{Kind: incident.KindCrash, Severity: incident.SeverityCritical,
			Culprits: []incident.Culprit{p.Culprit()}, culpritKeys: []string{k}, Key: "rank:" + k}
		f.Summary = fmt.Sprintf("%s died", p.Name())
		if c := mostBehind(j, p); c != nil {
			peer := c.leader
			f.Comm, f.Seq = c.group.ID, c.member.Comm.Count+1
			f.Summary += fmt.Sprintf(" after position %d of communicator %s (%s is at %d)",
				c.member.Comm.Count, shortComm(c.group.ID), peer.Proc.Name(), peer.Comm.Count)
			f.Victims = len(c.group.Members) - 1
		} else if g := firstGroup(j, p); g != nil {
			f.Comm = g.ID
			f.Victims = len(g.Members) - 1
		}
		for _, e := range d.evidence {
			f.addEvidence("%s", e)
		}
		if d.when != 0 {
			f.FaultAt = snapshot.Micros(d.when).Time()
		}
		if p.LastLine != 0 && j.Offline {
			f.addEvidence("its log has %d lines and stops there", p.Lines)
		}
		processEvidence(j, p, &f)
		out = append(out, f)
	}
	return out
}

// missingLocal stands for a process whose log is missing, known from its host and local
// rank; its global rank follows from the host's other ranks when they are numbered
// contiguously (rank = first rank of the host + local rank), else it stays unknown.
func missingLocal(j *Job, host string, local int) *Proc {
	base, ok := -1, true
	for _, p := range j.Procs {
		if p.Host != host || p.Rank < 0 || p.LocalRank < 0 {
			continue
		}
		if b := p.Rank - p.LocalRank; base < 0 {
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

// mostBehind finds the communicator where p lags its peers the most.
func mostBehind(j *Job, p *Proc) *behind {
	var best *behind
	gap := int64(0)
	for _, g := range j.Groups {
		var mine *Member
		var lead Member
		for i, m := range g.Members {
			if m.Proc == p {
				mine = &g.Members[i]
			} else if lead.Comm == nil || m.Comm.Count > lead.Comm.Count {
				lead = m
			}
		}
		if mine == nil || lead.Comm == nil {
			continue
		}
		if d := lead.Comm.Count - mine.Comm.Count; d > gap {
			gap = d
			best = &behind{group: g, member: *mine, leader: lead}
		}
	}
	return best
}

func firstGroup(j *Job, p *Proc) *Group {
	for _, g := range j.Groups {
		for _, m := range g.Members {
			if m.Proc == p {
				return g
			}
		}
	}
	return nil
}
