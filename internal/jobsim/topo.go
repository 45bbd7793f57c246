package jobsim

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/gpu"
	"github.com/ncclwatch/watchdog/heartbeat/ibport/ibsim"
)

// CommKind names the communicators of the simulated job.
type CommKind int

const (
	// CommWorld is the default process group: every rank (ncclCommInitRankConfig).
	CommWorld CommKind = iota
	// CommTP is tensor parallel: the ranks of one node (ncclCommSplit).
	CommTP
	// CommDP is data parallel: the same local rank on the nodes of one pipeline stage.
	CommDP
	// CommPP is pipeline parallel: the same local rank and data-parallel index across stages.
	CommPP
	numComms
)

var commNames = [numComms]string{"world", "tp", "dp", "pp"}

func (c CommKind) String() string {
	if c >= 0 && c < numComms {
		return commNames[c]
	}
	return "comm" + strconv.Itoa(int(c))
}

// NCCL datatypes and reduction ops the simulated job uses (§3.1, §3.2 of the reference).
const (
	dtFloat32  = 7
	dtBfloat16 = 9
	redSum     = 0
)

func dtypeName(dt int) string {
	switch dt {
	case dtFloat32:
		return "float32"
	case dtBfloat16:
		return "bfloat16"
	}
	return strconv.Itoa(dt)
}

func dtypeSize(dt int) uint64 {
	if dt == dtBfloat16 {
		return 2
	}
	return 4
}

// The modelled network: a GPT with hidden size 8192 and sequence length 4096 in bf16,
// sequence parallel over the node, four DDP buckets of about 25 MB (their counts differ,
// as parameter boundaries make them do).
const (
	seqTimesHidden = 4096 * 8192
	tpNormCount    = 16384
)

var dpBuckets = []uint64{13107200, 13041664, 12582912, 2359296}

// hcaCount is the HCAs per node: one per GPU, as on H100/H200 boxes.
const hcaCount = 8

// group is one communicator across its members.
type group struct {
	kind       CommKind
	members    []int // global ranks, ascending (the split key is the global rank)
	color      int
	splitCount int
	commID     uint64 // the Init line's commId where one is printed
	nNodes     int
	id         string // cross-rank identity, as logparse.Tracker names it
}

// commRank is one rank's view of a communicator.
type commRank struct {
	g          *group
	rank       int
	ptr        uint64
	localRanks int
	localRank  int
	stream     uint64
}

// planOp is one op of a rank's training step.
type planOp struct {
	comm    CommKind
	name    string // as NCCL prints it
	coll    bool   // counts in the communicator's collective sequence (not Send/Recv)
	count   uint64
	dtype   int
	root    int // Send/Recv: the peer's rank in the communicator
	frac    float64
	sendbuf uint64
	recvbuf uint64
}

// OpInfo describes one op of a rank's step, for choosing a fault's Op.
type OpInfo struct {
	Index    int
	Comm     CommKind
	Op       string
	Count    uint64
	Datatype string
	Peer     int // Send/Recv: the peer's global rank; -1 otherwise
}

// RankInfo is one rank process.
type RankInfo struct {
	Rank      int
	LocalRank int
	Node      string
	Host      string
	PID       int
	CudaDev   int
	BusID     string // as NCCL prints busId: "18000"
	NVMLBusID string // as NVML prints it: "00000000:18:00.0"
	HCA       string // the HCA its GPU uses: "mlx5_0"
	LogPath   string
}

// NodeInfo is one node of the simulated job.
type NodeInfo struct {
	Name   string
	Index  int
	Addr   string // IP of its bootstrap/OOB interface ib0
	LogDir string // holds nccl.<host>.<pid>.log, one per rank
	// IBRoot is its /sys/class/infiniband tree (mlx5_0..7, port 1 each); not written with
	// Config.LogsOnly.
	IBRoot string
	GPUs   *gpu.Fake // 8 GPUs whose readings follow the simulated activity
	Ranks  []RankInfo
}

type simRank struct {
	RankInfo
	node     *simNode
	stage    int
	dpIndex  int
	hca      int
	comms    [numComms]*commRank
	plan     []planOp
	perStep  [numComms]int64 // collectives per step on each communicator
	prefix   []byte          // "host:pid:"
	infoTail []byte          // " [dev] NCCL INFO "
}

type simNode struct {
	NodeInfo
	ranks []*simRank

	portMu      sync.Mutex
	ports       []ibsim.Port
	portWritten time.Time
}

// splitmix is a stateless hash: every random choice of the simulator is a function of the
// seed and what it is for, so that ranks can be generated in any order, or in parallel,
// and give the same output.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func (s *Sim) rnd(parts ...uint64) uint64 {
	h := splitmix(uint64(s.cfg.Seed))
	for _, p := range parts {
		h = splitmix(h ^ p)
	}
	return h
}

// unit returns a deterministic float in [0, 1).
func (s *Sim) unit(parts ...uint64) float64 {
	return float64(s.rnd(parts...)>>11) / (1 << 53)
}

// Random-choice purposes, mixed into rnd so that unrelated choices do not correlate.
const (
	purposePID uint64 = iota + 1
	purposePtr
	purposeCommID
	purposeNoise
	purposeJitter
	purposeStart
	purposeBuf
	purposeSkew
	purposeGPU
	purposePort
)

func nodeAddr(n int) string {
	return fmt.Sprintf("10.%d.%d.%d", 10+(n>>16)&0xff, (n>>8)&0xff, n&0xff+1)
}

// buildTopology creates nodes, ranks, communicators and step plans.
func (s *Sim) buildTopology() error {
	c := &s.cfg
	M, R, P := c.Nodes, c.RanksPerNode, c.PipelineStages
	perStage := M / P
	for n := 0; n < M; n++ {
		name := "node" + strconv.Itoa(n)
		node := &simNode{NodeInfo: NodeInfo{
			Name: name, Index: n, Addr: nodeAddr(n),
			LogDir: s.dir + "/" + name,
			IBRoot: s.dir + "/" + name + "/sys/class/infiniband",
			GPUs:   gpu.NewFake(hcaCount),
		}}
		s.nodes = append(s.nodes, node)
	}
	for r := 0; r < M*R; r++ {
		n, l := r/R, r%R
		node := s.nodes[n]
		pid := 4096 + r*24 + int(s.rnd(purposePID, uint64(r))%8)
		nvml := fmt.Sprintf("00000000:%02X:00.0", gpuBuses[l])
		packed, err := gpu.PackBusID(nvml)
		if err != nil {
			return fmt.Errorf("jobsim: %w", err)
		}
		sr := &simRank{
			RankInfo: RankInfo{Rank: r, LocalRank: l, Node: node.Name, Host: node.Name, PID: pid,
				CudaDev: l, BusID: packed, NVMLBusID: nvml, HCA: "mlx5_" + strconv.Itoa(l%hcaCount)},
			node: node, stage: n / perStage, dpIndex: n % perStage, hca: l % hcaCount,
		}
		sr.LogPath = node.LogDir + "/nccl." + sr.Host + "." + strconv.Itoa(pid) + ".log"
		sr.prefix = []byte(sr.Host + ":" + strconv.Itoa(pid) + ":")
		sr.infoTail = []byte(" [" + strconv.Itoa(l) + "] NCCL INFO ")
		node.ranks = append(node.ranks, sr)
		s.ranks = append(s.ranks, sr)
		s.byPID[pid] = sr
	}
	for _, node := range s.nodes {
		for _, r := range node.ranks {
			node.Ranks = append(node.Ranks, r.RankInfo)
		}
	}

	// Communicators, created in this order (the splitCount of each child).
	world := &group{kind: CommWorld, commID: s.rnd(purposeCommID), nNodes: M}
	for r := range s.ranks {
		world.members = append(world.members, r)
	}
	world.id = "0x" + strconv.FormatUint(world.commID, 16)
	s.groups = append(s.groups, world)
	var splits [][]*group // per kind, the groups
	tp := make([]*group, 0, M)
	if R > 1 {
		for n := 0; n < M; n++ {
			g := &group{kind: CommTP, nNodes: 1}
			for l := 0; l < R; l++ {
				g.members = append(g.members, n*R+l)
			}
			tp = append(tp, g)
		}
	}
	var dp []*group
	if perStage > 1 {
		for p := 0; p < P; p++ {
			for l := 0; l < R; l++ {
				g := &group{kind: CommDP, nNodes: perStage}
				for d := 0; d < perStage; d++ {
					g.members = append(g.members, (p*perStage+d)*R+l)
				}
				dp = append(dp, g)
			}
		}
	}
	var pp []*group
	if P > 1 {
		for d := 0; d < perStage; d++ {
			for l := 0; l < R; l++ {
				g := &group{kind: CommPP, nNodes: P}
				for p := 0; p < P; p++ {
					g.members = append(g.members, (p*perStage+d)*R+l)
				}
				pp = append(pp, g)
			}
		}
	}
	splits = append(splits, tp, dp, pp)
	splitCount := 0
	for _, gs := range splits {
		if len(gs) == 0 {
			continue
		}
		splitCount++
		for _, g := range gs {
			g.splitCount = splitCount
			g.color = pythonTupleColor(g.members)
			g.commID = splitmix(world.commID ^ uint64(g.color)*0x9e3779b97f4a7c15)
			switch s.d.split() {
			case splitAsRoot, splitWithCommID:
				g.id = "0x" + strconv.FormatUint(g.commID, 16)
			case splitNoCount:
				g.id = world.id + "/c" + strconv.Itoa(g.color) + "#1"
			default:
				g.id = world.id + "/s" + strconv.Itoa(g.splitCount) + "c" + strconv.Itoa(g.color)
			}
			s.groups = append(s.groups, g)
		}
	}
	for _, g := range s.groups {
		for i, r := range g.members {
			sr := s.ranks[r]
			cr := &commRank{g: g, rank: i,
				ptr:    0x55d000000000 + (s.rnd(purposePtr, uint64(r))%0xfffff)<<12 + uint64(g.kind)*0x1a2b40,
				stream: 0x55d100000000 + (s.rnd(purposePtr, uint64(r), 1)%0xfffff)<<12 + uint64(g.kind)*0x2c0}
			for _, m := range g.members {
				if s.ranks[m].node == sr.node {
					if m == r {
						cr.localRank = cr.localRanks
					}
					cr.localRanks++
				}
			}
			sr.comms[g.kind] = cr
		}
	}
	for _, r := range s.ranks {
		s.buildPlan(r)
	}
	return nil
}

// gpuBuses are the PCI buses of the 8 GPUs of an H100/H200 box, as gpu.NewFake gives them.
var gpuBuses = [hcaCount]int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

// buildPlan lays out one rank's training step: forward tensor-parallel AllGather and
// ReduceScatter per layer (activations from and to the neighbouring pipeline stages by
// Recv/Send), the same backward with DDP's bucket AllReduces overlapping it, then the
// tensor-parallel AllReduce of the norm gradients and the world AllReduce of the loss.
func (s *Sim) buildPlan(r *simRank) {
	P := s.cfg.PipelineStages
	p := r.stage
	tp, dp, pp := r.comms[CommTP], r.comms[CommDP], r.comms[CommPP]
	tpCount := uint64(seqTimesHidden / s.cfg.RanksPerNode)
	var fwd, bwd []planOp
	coll := func(k CommKind, name string, count uint64, dt int) planOp {
		return planOp{comm: k, name: name, coll: true, count: count, dtype: dt}
	}
	p2p := func(name string, peer int) planOp {
		return planOp{comm: CommPP, name: name, count: tpCount, dtype: dtBfloat16, root: peer}
	}
	if pp != nil && p > 0 {
		fwd = append(fwd, p2p("Recv", p-1))
	}
	for l := 0; l < s.cfg.Layers && tp != nil; l++ {
		fwd = append(fwd, coll(CommTP, "AllGather", tpCount, dtBfloat16), coll(CommTP, "ReduceScatter", tpCount, dtBfloat16))
	}
	if pp != nil && p < P-1 {
		fwd = append(fwd, p2p("Send", p+1))
	}
	if pp != nil && p < P-1 {
		bwd = append(bwd, p2p("Recv", p+1))
	}
	bucket := 0
	for l := 0; l < s.cfg.Layers; l++ {
		if tp != nil {
			bwd = append(bwd, coll(CommTP, "AllGather", tpCount, dtBfloat16), coll(CommTP, "ReduceScatter", tpCount, dtBfloat16))
		}
		if dp != nil && bucket < len(dpBuckets) {
			bwd = append(bwd, coll(CommDP, "AllReduce", dpBuckets[bucket], dtBfloat16))
			bucket++
		}
	}
	for ; dp != nil && bucket < len(dpBuckets); bucket++ {
		bwd = append(bwd, coll(CommDP, "AllReduce", dpBuckets[bucket], dtBfloat16))
	}
	if pp != nil && p > 0 {
		bwd = append(bwd, p2p("Send", p-1))
	}
	spread := func(ops []planOp, from, to float64) {
		for i := range ops {
			ops[i].frac = from + (to-from)*float64(i)/float64(len(ops))
		}
	}
	fw := 0.40 / float64(P)
	spread(fwd, 0.02+float64(p)*fw, 0.02+float64(p+1)*fw)
	bw := 0.42 / float64(P)
	spread(bwd, 0.45+float64(P-1-p)*bw, 0.45+float64(P-p)*bw)
	plan := append(fwd, bwd...)
	if tp != nil {
		o := coll(CommTP, "AllReduce", tpNormCount, dtFloat32)
		o.frac = 0.91
		plan = append(plan, o)
	}
	o := coll(CommWorld, "AllReduce", 1, dtFloat32)
	o.frac = 0.96
	plan = append(plan, o)

	// The caching allocator hands out the same buffers every step.
	base := 0x7f0000000000 + (s.rnd(purposeBuf, uint64(r.Rank))%0xfff)<<28
	for i := range plan {
		op := &plan[i]
		buf := base + uint64(i)<<26
		switch op.name {
		case "Send", "Recv":
			op.recvbuf = buf
		case "AllGather":
			op.recvbuf = buf
			op.sendbuf = buf + uint64(r.comms[op.comm].rank)*op.count*dtypeSize(op.dtype)
		case "ReduceScatter":
			op.sendbuf, op.recvbuf = buf, buf+op.count*dtypeSize(op.dtype)*uint64(r.comms[op.comm].g.size())
		default:
			op.sendbuf, op.recvbuf = buf, buf
		}
		if op.coll {
			r.perStep[op.comm]++
		}
	}
	r.plan = plan
}

func (g *group) size() int { return len(g.members) }

// StepOps lists a rank's ops of one step, in the order it issues them.
func (s *Sim) StepOps(rank int) []OpInfo {
	if rank < 0 || rank >= len(s.ranks) {
		return nil
	}
	r := s.ranks[rank]
	out := make([]OpInfo, len(r.plan))
	for i, op := range r.plan {
		peer := -1
		if !op.coll {
			peer = r.comms[op.comm].g.members[op.root]
		}
		out[i] = OpInfo{Index: i, Comm: op.comm, Op: op.name, Count: op.count, Datatype: dtypeName(op.dtype), Peer: peer}
	}
	return out
}

// CommID is the cross-rank identity of a rank's communicator as logparse.Tracker (and so
// the analysis and the detector) names it; "" when the rank has no such communicator.
func (s *Sim) CommID(rank int, c CommKind) string {
	if rank < 0 || rank >= len(s.ranks) || c < 0 || c >= numComms || s.ranks[rank].comms[c] == nil {
		return ""
	}
	return s.ranks[rank].comms[c].g.id
}
