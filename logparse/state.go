package logparse

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/ncclwatch/watchdog/snapshot"
)

// stateVersion is bumped when the checkpoint layout changes; older checkpoints are refused
// (the file is then read again from its start). 2: events in the snapshot contract's form.
const stateVersion = 2

// checkpoint is what a Tracker needs to resume mid-file after a sidecar restart.
type checkpoint struct {
	V               int              `json:"v"`
	Host            string           `json:"host"`
	PID             int              `json:"pid"`
	Version         string           `json:"nccl,omitempty"`
	TimestampDigits int              `json:"tsd"`
	LocalRank       int              `json:"lrank"`
	NNodes          int              `json:"nnodes,omitempty"`
	Network         string           `json:"net,omitempty"`
	NetDevs         []string         `json:"netdevs,omitempty"`
	IBNone          bool             `json:"ibnone,omitempty"`
	BootstrapAddr   string           `json:"boot,omitempty"`
	Transports      []string         `json:"tr,omitempty"`
	Addrs           []string         `json:"addrs,omitempty"`
	LauncherRank    int              `json:"launcher"`
	Comms           []commCheckpoint `json:"comms"`
	SplitSeq        []splitSeqEntry  `json:"splits,omitempty"`
	Events          []snapshot.Event `json:"events,omitempty"`
	EventTotal      int64            `json:"evtotal,omitempty"`
	Lines           int64            `json:"lines"`
	Issued          int64            `json:"issued,omitempty"`
	Kinds           [NumKinds]int64  `json:"kinds"`
	FirstTime       int64            `json:"first,omitempty"`
	LastTime        int64            `json:"last,omitempty"`
	LastWarn        bool             `json:"lastwarn,omitempty"`
}

type commCheckpoint struct {
	Ptr        uint64             `json:"ptr"`
	ID         string             `json:"id"`
	Rank       int                `json:"rank"`
	NRanks     int                `json:"n"`
	CudaDev    int                `json:"dev"`
	NvmlDev    int                `json:"nvml"`
	BusID      uint64             `json:"bus"`
	API        string             `json:"api,omitempty"`
	Parent     uint64             `json:"parent,omitempty"`
	SplitCount int                `json:"split"`
	Color      int                `json:"color,omitempty"`
	State      snapshot.CommState `json:"st"`
	Created    int64              `json:"created,omitempty"`
	Count      int64              `json:"c"`
	LastT      int64              `json:"lt,omitempty"`
	Digest     uint64             `json:"h"`
	Recent     []OpRecord         `json:"recent,omitempty"`
	Marks      []Mark             `json:"marks,omitempty"`
	MarksN     []int              `json:"marksn,omitempty"`
	P2P        map[int]*P2PCount  `json:"p2p,omitempty"`
}

type splitSeqEntry struct {
	Parent string `json:"p"`
	Color  int    `json:"c"`
	N      int    `json:"n"`
}

// MarshalState checkpoints the tracker. keepRecent bounds the recent ops saved per
// communicator (the ring refills from new lines).
func (t *Tracker) MarshalState(keepRecent int) ([]byte, error) {
	cp := checkpoint{
		V: stateVersion, Host: t.Host, PID: t.PID, Version: t.Version, TimestampDigits: t.TimestampDigits,
		LocalRank: t.LocalRank, NNodes: t.NNodes, Network: t.Network, NetDevs: t.NetDevs, IBNone: t.IBNone,
		BootstrapAddr: t.BootstrapAddr, Transports: t.Transports, Addrs: t.Addrs, LauncherRank: t.LauncherRank,
		Events: t.Events(), EventTotal: t.eventTotal, Lines: t.Lines, Issued: t.Issued, Kinds: t.Kinds,
		FirstTime: t.FirstTime, LastTime: t.LastTime, LastWarn: t.lastWarn,
	}
	for _, c := range t.all {
		recent := c.Recent()
		if keepRecent >= 0 && len(recent) > keepRecent {
			recent = recent[len(recent)-keepRecent:]
		}
		cc := commCheckpoint{Ptr: c.Ptr, ID: c.ID, Rank: c.Rank, NRanks: c.NRanks, CudaDev: c.CudaDev,
			NvmlDev: c.NvmlDev, BusID: c.BusID, API: c.API, Parent: c.Parent, SplitCount: c.SplitCount,
			Color: c.Color, State: c.State, Created: c.Created, Count: c.Count, LastT: c.LastT, Digest: c.Digest,
			Recent: recent, P2P: c.P2P}
		for lvl := range markLevels {
			n := min(c.marksN[lvl], marksPerLevel)
			cc.Marks = append(cc.Marks, c.marks[lvl][:n]...)
			cc.MarksN = append(cc.MarksN, c.marksN[lvl])
		}
		cp.Comms = append(cp.Comms, cc)
	}
	for k, n := range t.splitSeq {
		cp.SplitSeq = append(cp.SplitSeq, splitSeqEntry{Parent: k.parent, Color: k.color, N: n})
	}
	sort.Slice(cp.SplitSeq, func(a, b int) bool {
		if cp.SplitSeq[a].Parent != cp.SplitSeq[b].Parent {
			return cp.SplitSeq[a].Parent < cp.SplitSeq[b].Parent
		}
		return cp.SplitSeq[a].Color < cp.SplitSeq[b].Color
	})
	b, err := json.Marshal(&cp)
	if err != nil {
		return nil, fmt.Errorf("tracker checkpoint: %w", err)
	}
	return b, nil
}

// RestoreTracker rebuilds a tracker from MarshalState's output.
func RestoreTracker(b []byte, opts TrackerOptions) (*Tracker, error) {
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("tracker checkpoint: %w", err)
	}
	if cp.V != stateVersion {
		return nil, fmt.Errorf("tracker checkpoint version %d, want %d", cp.V, stateVersion)
	}
	t := NewTracker(opts)
	t.Host, t.PID, t.Version, t.TimestampDigits = cp.Host, cp.PID, cp.Version, cp.TimestampDigits
	t.LocalRank, t.NNodes, t.Network, t.NetDevs, t.IBNone = cp.LocalRank, cp.NNodes, cp.Network, cp.NetDevs, cp.IBNone
	t.BootstrapAddr, t.Transports, t.Addrs, t.LauncherRank = cp.BootstrapAddr, cp.Transports, cp.Addrs, cp.LauncherRank
	if cp.LauncherRank >= 0 {
		t.launcher[RankFromJob].note(cp.LauncherRank)
	}
	t.eventTotal, t.Lines, t.Kinds, t.FirstTime, t.LastTime, t.lastWarn = cp.EventTotal, cp.Lines, cp.Kinds, cp.FirstTime, cp.LastTime, cp.LastWarn
	t.Issued = cp.Issued
	for _, e := range cp.Events {
		t.keep(e)
	}
	t.eventTotal = cp.EventTotal
	for _, s := range cp.SplitSeq {
		t.splitSeq[splitKey{parent: s.Parent, color: s.Color}] = s.N
	}
	for _, cc := range cp.Comms {
		if len(t.all) >= t.opts.MaxComms {
			break
		}
		c := t.newComm(cc.Ptr, cc.Created)
		c.ID, c.Rank, c.NRanks, c.CudaDev, c.NvmlDev, c.BusID = cc.ID, cc.Rank, cc.NRanks, cc.CudaDev, cc.NvmlDev, cc.BusID
		c.API, c.Parent, c.SplitCount, c.Color, c.State = cc.API, cc.Parent, cc.SplitCount, cc.Color, cc.State
		c.Count, c.LastT, c.Digest, c.P2P = cc.Count, cc.LastT, cc.Digest, cc.P2P
		for _, r := range cc.Recent {
			if r.Seq >= 1 && r.Seq <= c.Count {
				c.ring[int(r.Seq-1)&(len(c.ring)-1)] = r
			}
		}
		i := 0
		for lvl := range markLevels {
			if lvl >= len(cc.MarksN) {
				break
			}
			n := min(cc.MarksN[lvl], marksPerLevel)
			for k := 0; k < n && i < len(cc.Marks); k++ {
				c.marks[lvl][k] = cc.Marks[i]
				i++
			}
			c.marksN[lvl] = cc.MarksN[lvl]
		}
		if len(c.P2P) > maxPeers {
			c.P2P = nil
		}
		// Where the process was, for the stage of its next events.
		t.ops += c.Count
		for _, p := range c.P2P {
			t.ops += p.Sends + p.Recvs
		}
		t.readyEver = t.readyEver || c.State != snapshot.CommInit
	}
	return t, nil
}
