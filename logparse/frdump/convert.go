package frdump

import (
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/snapshot"
)

// rankName reads the rank from a dump's file name: torch writes <prefix><rank>
// (TORCH_FR_DUMP_TEMP_FILE, formerly TORCH_NCCL_DEBUG_INFO_TEMP_FILE, default
// /tmp/nccl_trace_rank_), and a saved JSON dump usually keeps the same name plus ".json".
var rankName = regexp.MustCompile(`^(.*?)(\d+)(\.json|\.pkl|\.pickle)?(\.gz|\.zst)?$`)

// RankOfName splits a dump's base name into its prefix and rank; ok is false when the name
// ends in no number.
func RankOfName(base string) (prefix string, rank int, ok bool) {
	m := rankName.FindStringSubmatch(base)
	if m == nil || len(m[2]) > 9 {
		return "", -1, false
	}
	r, err := strconv.Atoi(m[2])
	if err != nil {
		return "", -1, false
	}
	return m[1], r, true
}

// OwnRank is the rank the dump itself shows it was written by, -1 when it cannot tell: the
// one rank every group of pg_config holds (a process records only the groups it belongs
// to), else the sender of its sends and the receiver of its receives.
func (d *Dump) OwnRank() int {
	var common map[int]bool
	for _, g := range d.Groups {
		if g.Ranks == nil {
			continue
		}
		in := map[int]bool{}
		for _, r := range g.Ranks {
			if common == nil || common[r] {
				in[r] = true
			}
		}
		common = in
	}
	if len(common) == 1 {
		for r := range common {
			return r
		}
	}
	groups := d.groupsByName()
	for i := range d.Entries {
		e := &d.Entries[i]
		if !e.P2P {
			continue
		}
		g := groups[e.PGName]
		self := selfOf(e.Name)
		if g != nil && self >= 0 && self < len(g.Ranks) && (len(common) == 0 || common[g.Ranks[self]]) {
			return g.Ranks[self]
		}
	}
	return -1
}

// selfOf is the group rank a send or receive names as its own: the sender of "send 1->2",
// the receiver of "recv 3<-0".
func selfOf(name string) int {
	word, meta, _ := strings.Cut(opBase(name), " ")
	switch word {
	case "send":
		if src, _, ok := strings.Cut(meta, "->"); ok {
			return atoiOr(src, -1)
		}
	case "recv":
		if dst, _, ok := strings.Cut(meta, "<-"); ok {
			return atoiOr(dst, -1)
		}
	}
	return -1
}

func (d *Dump) groupsByName() map[string]*Group {
	out := make(map[string]*Group, len(d.Groups))
	for i := range d.Groups {
		if _, dup := out[d.Groups[i].Name]; !dup {
			out[d.Groups[i].Name] = &d.Groups[i]
		}
	}
	return out
}

// stateRank orders entry states: a coalesced group's members keep "scheduled" (their
// events belong to the group's own entry), so the most advanced state of a position is its
// state.
func stateRank(s string) int {
	switch s {
	case "completed":
		return 2
	case "started":
		return 1
	}
	return 0
}

// slot is one position of a group: the entries that share a collective_seq_id (a coalesced
// group and its members) or one point-to-point entry.
type slot struct {
	op       snapshot.Op
	p2p      bool
	state    string
	name     string
	created  int64
	started  int64
	ended    int64
	timeout  int64
	retired  bool
	where    string
	first    int // index of its first entry in record order
	multiple bool
}

// Process is the dump as the process of rank (-1: unknown), read from file: one Comm per
// process group, as snapshot/fr.go describes.
func (d *Dump) Process(rank int, file string) snapshot.Process {
	// Its ops carry the times PyTorch took them, in µs: as good as NCCL's own timestamps.
	p := snapshot.Process{Rank: rank, LocalRank: -1, CudaDev: -1, File: file, Source: snapshot.SourceFR,
		NCCL: strings.SplitN(strings.TrimPrefix(d.CommLib, "NCCL "), "+", 2)[0], Timestamps: true, TSDigits: 6}
	// The groups of pg_config, then those the entries name that it does not.
	all := append([]Group(nil), d.Groups...)
	known := make(map[string]bool, len(all))
	for _, g := range all {
		known[g.Name] = true
	}
	for i := range d.Entries {
		if name := d.Entries[i].PGName; !known[name] {
			known[name] = true
			all = append(all, Group{Name: name, Desc: d.Entries[i].PGDesc})
		}
	}
	byGroup := map[string][]int{}
	pgid := map[string]int64{}
	var newest int64
	for i := range d.Entries {
		e := &d.Entries[i]
		byGroup[e.PGName] = append(byGroup[e.PGName], i)
		if e.PGID >= 0 {
			pgid[e.PGName] = e.PGID
		}
		newest = max(newest, e.Created, e.Started, e.Completed)
	}
	p.LastLine = snapshot.Micros(newest / 1000)
	seen := map[string]bool{}
	largest, world := 0, 0
	for _, g := range all {
		if seen[g.Name] {
			continue
		}
		seen[g.Name] = true
		c := d.comm(&g, rank, byGroup[g.Name], pgid)
		p.Comms = append(p.Comms, c)
		largest = max(largest, c.NRanks)
		if g.Name == "0" {
			// The default group, created first, holds every rank.
			world = c.NRanks
		}
	}
	p.WorldSize = max(world, largest)
	return p
}

func (d *Dump) comm(g *Group, rank int, idx []int, pgid map[string]int64) snapshot.Comm {
	c := snapshot.Comm{ID: snapshot.FRCommID(g.Name, g.Ranks), Rank: -1, NRanks: len(g.Ranks), State: snapshot.CommReady}
	for i, r := range g.Ranks {
		if r == rank {
			c.Rank = i
			break
		}
	}
	fr := &snapshot.FRGroup{Name: g.Name, Desc: g.Desc}
	if len(g.Ranks) > 0 {
		fr.Ranks = append([]int(nil), g.Ranks[:min(len(g.Ranks), snapshot.MaxFRGroupRanks)]...)
	}
	c.FR = fr
	// Positions: collectives by their sequence number, point-to-point entries each.
	var slots []*slot
	coll := map[int64]*slot{}
	for _, i := range idx {
		e := &d.Entries[i]
		op, peer, info := opOf(e.Name)
		count, dtype := ncclCount(e, info, len(g.Ranks))
		o := snapshot.Op{Op: op, Count: count, Dtype: dtype, T: snapshot.Micros(e.Created / 1000)}
		if e.RecordID >= 0 {
			o.Idx = e.RecordID + 1
		}
		if e.P2P {
			o.Seq, o.Root = e.P2PSeq, peer
			slots = append(slots, newSlot(e, o, i))
			continue
		}
		o.Seq = e.CollSeq
		s := coll[e.CollSeq]
		if s == nil {
			s = newSlot(e, o, i)
			coll[e.CollSeq] = s
			slots = append(slots, s)
			continue
		}
		s.merge(e, o)
	}
	done := &snapshot.Completion{}
	var recent snapshot.Ops
	collDone, p2pDone := int64(-1), int64(-1) // the newest position with every one up to it completed
	collBlocked, p2pBlocked := false, false
	var inflight *slot
	for _, s := range slots {
		finished := s.state == "completed"
		if s.p2p {
			done.P2PIssued = max(done.P2PIssued, s.op.Seq)
			if !finished {
				p2pBlocked = true
			} else if !p2pBlocked {
				p2pDone = s.op.Seq
			}
			addP2P(&c, s)
		} else {
			recent = append(recent, s.op)
			c.Count = max(c.Count, s.op.Seq)
			if s.state != "scheduled" {
				done.Started = max(done.Started, s.op.Seq)
			}
			if !finished {
				collBlocked = true
			} else if !collBlocked {
				collDone = s.op.Seq
			}
		}
		if finished {
			done.LastDone = max(done.LastDone, snapshot.Micros(s.ended/1000))
		} else if inflight == nil || s.first < inflight.first {
			inflight = s
		}
		done.LastEvent = max(done.LastEvent, snapshot.Micros(max(s.created, s.started, s.ended)/1000))
	}
	sort.SliceStable(recent, func(a, b int) bool { return recent[a].Seq < recent[b].Seq })
	if len(recent) > 0 {
		c.Recent = recent
		last := recent[len(recent)-1]
		c.Last = &last
	}
	done.Issued = c.Count
	if collDone >= 0 {
		done.Done = collDone
	} else if len(recent) > 0 {
		// Its oldest entry in the dump is pending: those before it, overwritten in the
		// ring, had completed.
		done.Done = recent[0].Seq - 1
	}
	if p2pDone >= 0 {
		done.P2PDone = p2pDone
	}
	if id, ok := pgid[g.Name]; ok {
		if st, ok := d.Status[id]; ok {
			// pg_status is what the watchdog last recorded; the entries were queried when
			// the dump was written. The newer of the two counts.
			done.Issued = max(done.Issued, st.Enqueued)
			done.Started = max(done.Started, st.Started)
			if st.Completed > done.Done && !collBlocked {
				done.Done = st.Completed
			}
			c.Count = max(c.Count, st.Enqueued)
		}
	}
	if inflight != nil {
		done.InFlight = &snapshot.Flight{Op: inflight.op, P2P: inflight.p2p, GPUStart: snapshot.Micros(inflight.started / 1000)}
	}
	if len(slots) > 0 || done.Issued > 0 {
		c.Done = done
	}
	// The pending entries, then the newest completed one.
	var newestDone *slot
	for _, s := range slots {
		if s.state == "completed" {
			if newestDone == nil || s.first > newestDone.first {
				newestDone = s
			}
			continue
		}
		fr.Pending++
		if len(fr.Ops) < snapshot.MaxFROps {
			fr.Ops = append(fr.Ops, s.frOp())
		}
	}
	if newestDone != nil {
		fr.Ops = append(fr.Ops, newestDone.frOp())
	}
	return c
}

func newSlot(e *Entry, o snapshot.Op, i int) *slot {
	return &slot{op: o, p2p: e.P2P, state: e.State, name: e.Name, created: e.Created, started: e.Started,
		ended: e.Completed, timeout: e.TimeoutMs, retired: e.Retired, where: e.Where, first: i}
}

// merge folds another entry of the same collective position (a coalesced group) in.
func (s *slot) merge(e *Entry, o snapshot.Op) {
	if !s.multiple {
		s.multiple = true
	}
	if o.Op != s.op.Op || o.Dtype != s.op.Dtype {
		s.op.Op = "Coalesced"
	}
	if opBase(e.Name) == "coalesced" {
		s.name = e.Name
	}
	if s.op.Op != "Coalesced" {
		s.op.Count += o.Count
	}
	if stateRank(e.State) > stateRank(s.state) {
		s.state = e.State
	}
	s.started = max(s.started, e.Started)
	s.ended = max(s.ended, e.Completed)
	s.retired = s.retired || e.Retired
}

func (s *slot) frOp() snapshot.FROp {
	return snapshot.FROp{Op: s.op, P2P: s.p2p, State: snapshot.OpState(s.state), Name: s.name,
		Started: snapshot.Micros(s.started / 1000), Ended: snapshot.Micros(s.ended / 1000),
		TimeoutMs: s.timeout, Retired: s.retired, Where: s.where}
}

// addP2P counts a send or receive with its peer.
func addP2P(c *snapshot.Comm, s *slot) {
	if s.op.Root < 0 {
		return
	}
	var row *snapshot.P2P
	for i := range c.P2P {
		if c.P2P[i].Peer == s.op.Root {
			row = &c.P2P[i]
		}
	}
	if row == nil {
		if len(c.P2P) >= snapshot.MaxPeers {
			return
		}
		c.P2P = append(c.P2P, snapshot.P2P{Peer: s.op.Root})
		row = &c.P2P[len(c.P2P)-1]
	}
	if s.op.Op == "Send" {
		row.Sends++
		row.LastSend = max(row.LastSend, s.op.T)
	} else {
		row.Recvs++
		row.LastRecv = max(row.LastRecv, s.op.T)
	}
}
