package fleet

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// PartKind is the kind of a node's part that can be a root.
type PartKind string

const (
	PartHost PartKind = "host" // the host itself: CPU, memory, OS, power, the node as a whole
	PartGPU  PartKind = "gpu"  // one GPU, by its PCI bus id
	PartNIC  PartKind = "nic"  // one NIC port (e.g. mlx5_1:1), or the node's network when no port is named
	PartLink PartKind = "link" // the link between this node and a peer (ID is the peer node)
)

// PartKinds lists every kind, for renderers and metrics that must name each one.
var PartKinds = []PartKind{PartHost, PartGPU, PartNIC, PartLink}

// Part is one part of one node.
type Part struct {
	Kind PartKind `json:"kind"`
	Node string   `json:"node"`
	// ID names the part on its node: a GPU's bus id, a NIC port, a link's peer node;
	// empty for the host (and for a node's network when no port was named).
	ID string `json:"id,omitempty"`
}

// Key is the part's stable name: "gpu:node7:1b000", "host:node7", "link:node7:node9".
func (p Part) Key() string {
	if p.ID == "" {
		return string(p.Kind) + ":" + p.Node
	}
	return string(p.Kind) + ":" + p.Node + ":" + p.ID
}

// String is the part as an operator reads it.
func (p Part) String() string {
	switch p.Kind {
	case PartGPU:
		return "GPU " + p.ID + " of " + p.Node
	case PartNIC:
		if p.ID == "" {
			return "network of " + p.Node
		}
		return "NIC " + p.ID + " of " + p.Node
	case PartLink:
		if p.ID == "" {
			return "links of " + p.Node
		}
		return "link " + p.Node + " - " + p.ID
	}
	return "host " + p.Node
}

// blame is what a root of one cause class says about a node.
type blame struct {
	kind PartKind
	// sameJob: repeats within one job count as independent evidence. True for hardware
	// (a throttling GPU throttles whatever runs on it); false for host-side stalls and
	// slowness, which may be the job's own (its rank 0 logs, its input pipeline), so they
	// indict the node only across jobs.
	sameJob bool
}

// causeBlame is the table of cause classes that indict a node part. Causes not listed
// (mismatch, order, setup, application, init, NCCL, GPU busy with other work) are the
// job's own and are never booked against a node.
var causeBlame = map[incident.Cause]blame{
	incident.CauseGPUThrottled: {PartGPU, true},
	incident.CauseGPUFault:     {PartGPU, true},
	incident.CauseLink:         {PartNIC, true},
	incident.CauseNetwork:      {PartNIC, true},
	incident.CauseHostStalled:  {PartHost, false},
	incident.CauseHostSlow:     {PartHost, false},
	incident.CauseDied:         {PartHost, false},
}

// kindBlame indicts by incident kind: for a lost node whatever its cause, and for
// incidents that carry no cause class.
var kindBlame = map[incident.Kind]blame{
	incident.KindLostNode:  {PartHost, true},
	incident.KindGPU:       {PartGPU, true},
	incident.KindLink:      {PartNIC, true},
	incident.KindStraggler: {PartHost, false},
	incident.KindHang:      {PartHost, false},
	incident.KindCrash:     {PartHost, false},
}

func blameOf(inc *incident.Incident) (blame, bool) {
	if b, ok := kindBlame[inc.Kind]; ok && inc.Kind == incident.KindLostNode {
		return b, true
	}
	if inc.Cause != incident.CauseUnknown {
		b, ok := causeBlame[inc.Cause]
		return b, ok
	}
	b, ok := kindBlame[inc.Kind]
	return b, ok
}

// Places maps what a job's culprits name to the job's nodes: the hostname a rank printed
// to the node its sidecar publishes as, and a rank (host:pid) to its GPU's bus id. Both
// may be nil.
type Places struct {
	Nodes map[string]string // host -> node
	GPUs  map[string]string // "host:pid" -> bus id
}

func (pl Places) node(host string) string {
	if n, ok := pl.Nodes[host]; ok && n != "" {
		return n
	}
	return host
}

// PartsOf names the node parts an incident blames, and whether repeats within one job
// count; none for a cause that is the job's own, or culprits without a host.
func PartsOf(inc *incident.Incident, pl Places) (parts []Part, sameJob bool) {
	b, ok := blameOf(inc)
	if !ok {
		return nil, false
	}
	if !b.sameJob && onlyRankZero(inc.Culprits) {
		// Rank 0 is slow or stalls in many jobs by its role (logging, checkpoints,
		// evaluation), and schedulers put it on the allocation's first node: booked against
		// nodes, a low-numbered node would collect every job's rank-0 trouble.
		return nil, false
	}
	var hosts []string
	for _, c := range inc.Culprits {
		if usableHost(c.Host) && !slices.Contains(hosts, pl.node(c.Host)) {
			hosts = append(hosts, pl.node(c.Host))
		}
	}
	add := func(p Part) {
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	for _, c := range inc.Culprits {
		if !usableHost(c.Host) {
			continue
		}
		node := pl.node(c.Host)
		switch b.kind {
		case PartGPU:
			bus := busID(c.GPU)
			if bus == "" && c.PID > 0 {
				bus = pl.GPUs[c.Host+":"+strconv.Itoa(c.PID)]
			}
			if bus == "" {
				add(Part{Kind: PartHost, Node: node})
			} else {
				add(Part{Kind: PartGPU, Node: node, ID: bus})
			}
		case PartNIC:
			switch {
			case c.Port != "":
				add(Part{Kind: PartNIC, Node: node, ID: c.Port})
			case len(hosts) == 2:
				// A link between two hosts: either end may be at fault; the judge asks
				// which end recurs with different peers.
				peer := hosts[0]
				if peer == node {
					peer = hosts[1]
				}
				add(Part{Kind: PartLink, Node: node, ID: peer})
			default:
				add(Part{Kind: PartNIC, Node: node})
			}
		default:
			add(Part{Kind: PartHost, Node: node})
		}
	}
	return parts, b.sameJob
}

func onlyRankZero(cs []incident.Culprit) bool {
	for _, c := range cs {
		if c.Rank != 0 {
			return false
		}
	}
	return len(cs) > 0
}

func usableHost(h string) bool { return h != "" && h != "?" && !strings.ContainsAny(h, "\n\r\x00") }

// busID takes the bus id out of a culprit's GPU field: "3 (bus 1b000)" -> "1b000"; a
// bare bus id is itself; a bare index is "index N" (the node's Nth GPU).
func busID(gpu string) string {
	gpu = strings.TrimSpace(gpu)
	if gpu == "" {
		return ""
	}
	if _, rest, ok := strings.Cut(gpu, "(bus "); ok {
		if id, _, ok := strings.Cut(rest, ")"); ok && id != "" {
			return id
		}
	}
	if strings.Trim(gpu, "0123456789") == "" {
		return "index " + gpu
	}
	return gpu
}

// maxLost bounds the job time one incident books: an incident left open for days (a job
// that hung and was never killed) says little more after a day.
const maxLost = 24 * time.Hour

// LostOf is the job time an incident cost: its episode's lost time when the engine
// measured one, else the span from the fault (or the opening) to its resolution (or the
// last time it was seen), for a stall stops the whole job.
func LostOf(inc *incident.Incident) time.Duration {
	if inc.Episode != nil && inc.Episode.Lost > 0 {
		return min(inc.Episode.Lost, maxLost)
	}
	start := inc.FaultAt
	if start.IsZero() || (!inc.OpenedAt.IsZero() && inc.OpenedAt.Before(start)) {
		start = inc.OpenedAt
	}
	end := inc.LastSeen
	if inc.ResolvedAt != nil && !inc.ResolvedAt.IsZero() {
		end = *inc.ResolvedAt
	}
	if start.IsZero() || end.Before(start) {
		return 0
	}
	return min(end.Sub(start), maxLost)
}
