package detect

import (
	"fmt"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// netPluginErrors reads a network plugin's failed transfers (AWS OFI NCCL over libfabric,
// on EFA and other providers): a request the fabric could not deliver to its peer is the
// network path's fault or the peer's node's, not a process that exited, though NCCL (and
// PyTorch after it) calls it a remote error. One finding per reporting host; the plugin
// does not name the peer.
func netPluginErrors(j *Job, cfg Config) []Finding {
	found := map[string]*Finding{}
	var order []string
	for _, p := range j.Procs {
		for _, e := range p.Events {
			if e.Kind != snapshot.EventNetError || !e.Fatal || !recentEvent(j, cfg.EventConfig, int64(e.T)) || echoed(j, p, e) {
				continue
			}
			key := "link:net:" + p.Host
			f := found[key]
			if f == nil {
				f = &Finding{Kind: incident.KindLink, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{p.Culprit()}, Key: key}
				f.Summary = fmt.Sprintf("the network plugin (libfabric, e.g. AWS EFA) of %s failed a transfer (%s): the fabric could not carry it to the peer: the peer's node or its network device went away, or the path between them failed (on EFA, a security group that does not allow all traffic between the nodes fails the first transfer); the peer's log and fi_info on both nodes say which",
					p.Name(), ofiWords(e))
				if e.T != 0 {
					f.FaultAt = e.T.Time()
				}
				found[key] = f
				order = append(order, key)
			}
			f.Victims++
			f.culpritKeys = appendUnique(f.culpritKeys, p.Key())
			f.addEvidence("%s: %s", p.Name(), e.Msg)
		}
	}
	var out []Finding
	for _, k := range order {
		out = append(out, *found[k])
	}
	return out
}

// ofiWords is "RC 113: no route to host, UNDELIVERABLE": libfabric's RC is an errno.
func ofiWords(e snapshot.Event) string {
	rc := e.Code
	if rc < 0 {
		rc = -rc
	}
	errnos := map[int]string{5: "I/O error", 104: "connection reset", 110: "timed out", 111: "connection refused",
		112: "host is down", 113: "no route to host", 125: "canceled"}
	w := ""
	if e.Code != 0 {
		w = fmt.Sprintf("RC %d", e.Code)
		if s, ok := errnos[rc]; ok {
			w += ": " + s
		}
	}
	if e.Detail != "" {
		if w != "" {
			w += ", "
		}
		w += e.Detail
	}
	return orUnknown(w)
}
