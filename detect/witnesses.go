package detect

import (
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// witnessesFoldIntoTheirRoot: what one rank saw of another's failure ("Connection closed by
// remote peer <address>", a remote error) is a witness, not a root: an address names a host,
// and a host runs several ranks (or the address resolves to no host the logs know, or there
// is none). The root it witnessed is known elsewhere: a process the sidecar saw exit, that a
// survivor named or the launcher reported (a crash); an error that tells of a death (an
// OOM); or a rank the others wait for that left or stopped (a hang root). The witness is that
// root's evidence, and dates it if it came first. Live, a witness alone waits witnessGrace
// for its root to show before it stands on its own.
func witnessesFoldIntoTheirRoot(j *Job, cfg Config, fs *findings) {
	hosts := map[string]bool{}
	// Processes that saw a connection closed by its peer: when several died on the host,
	// as one liveness check sees a rank and the peers that aborted on its death, those
	// that saw their connections broken are not the one that broke them.
	observed := map[string]bool{}
	for _, p := range j.Procs {
		hosts[p.Host] = true
		for _, e := range p.Events {
			if e.Kind == snapshot.EventConnClosedRemote {
				observed[p.Key()] = true
			}
		}
	}
	observer := func(f *Finding) bool {
		for _, k := range f.culpritKeys {
			if observed[k] {
				return true
			}
		}
		return false
	}
	hostLevel := func(f *Finding) bool {
		return f.witness && (len(f.Culprits) == 0 || len(f.Culprits) == 1 && f.Culprits[0].Rank < 0)
	}
	kept := fs.crashes[:0]
	var witnesses []Finding
	for _, f := range fs.crashes {
		if hostLevel(&f) {
			witnesses = append(witnesses, f)
			continue
		}
		kept = append(kept, f)
	}
	for _, hf := range witnesses {
		// An address no process's log resolves (loopback, a NAT), or none at all, may lead
		// to any host.
		anyHost := len(hf.Culprits) == 0 || !hosts[hf.Culprits[0].Host]
		on := func(f *Finding) bool {
			return len(f.Culprits) > 0 && (anyHost || f.Culprits[0].Host == hf.Culprits[0].Host)
		}
		var dead *Finding
		for i := range kept {
			k := &kept[i]
			if hostLevel(k) || !on(k) || diedLongAfter(k, &hf, cfg) {
				// A death dated well after what the witness saw is not the one it saw
				// (the launcher killed a rank that had left long before).
				continue
			}
			switch {
			case dead == nil, observer(dead) && !observer(k):
				dead = k
			case observer(k) == observer(dead) && earlier(k, dead):
				dead = k
			}
		}
		if dead == nil {
			dead = deathOf(fs.errors, on)
		}
		if dead == nil {
			dead = stoppedRoot(fs.stalls, on)
		}
		if dead == nil {
			if witnessStands(j, cfg, &hf) {
				kept = append(kept, hf)
			}
			continue
		}
		absorb(dead, &hf)
		if !hf.FaultAt.IsZero() && (dead.FaultAt.IsZero() || hf.FaultAt.Before(dead.FaultAt)) {
			dead.FaultAt = hf.FaultAt
		}
		dead.Victims = max(dead.Victims, hf.Victims)
	}
	fs.crashes = kept
}

// witnessStands says whether a witness with no root to fold into is reported: offline, or
// live once its root had time to show: a death is seen within a second or two, a rank
// that left or stopped once its communicator sat still for the hang floor.
func witnessStands(j *Job, cfg Config, f *Finding) bool {
	return j.Offline || f.FaultAt.IsZero() || j.Now.Sub(f.FaultAt) >= cfg.HangFloor+2*time.Second
}

// deathOf is the error finding that tells of a process's death (its OOM, an error it died
// of) where the witness points, nil when none or several.
func deathOf(errors []Finding, on func(*Finding) bool) *Finding {
	var found *Finding
	for i := range errors {
		e := &errors[i]
		if e.Cause != incident.CauseDied && e.Cause != incident.CauseApplication || !on(e) {
			continue
		}
		if found != nil {
			return nil
		}
		found = e
	}
	return found
}

// stoppedRoot is the one critical hang root where the witness points (a rank that left its
// communicator, stopped or died while the others wait for it), nil when none or several.
func stoppedRoot(stalls []Finding, on func(*Finding) bool) *Finding {
	var found *Finding
	for i := range stalls {
		f := &stalls[i]
		if f.Kind != incident.KindHang || f.Severity != incident.SeverityCritical || !on(f) {
			continue
		}
		if found != nil {
			return nil
		}
		found = f
	}
	return found
}
