// Package simjob simulates the node snapshots of a large training job without running it:
// what the load generator publishes for thousands of nodes, and what the detector's and the
// wire encoding's benchmarks decode. Each node has 8 ranks; each rank the communicators of
// a Megatron-like job (the world, a tensor-parallel group of its node, a data-parallel group
// of its pipeline stage, a pipeline group of send/recv), one training step per StepTime,
// ranks logging each op within a few milliseconds of each other, and 8 GPUs and 8 IB ports
// whose samples change every second as real ones do.
package simjob

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Job is one simulated job's progress, shared by the goroutines of its nodes.
type Job struct {
	Name  string
	nodes int
	pp    int
	step  time.Duration
	start time.Time
	// Culprit is the rank that stops once Inject is called.
	Culprit int

	mu        sync.Mutex
	faultStep int64 // 0: healthy
}

// New returns a job of nodes × 8 ranks in pp pipeline stages (reduced until it divides
// the nodes), one step per step, started at start; culprit is the rank Inject stops.
func New(name string, nodes, pp int, step time.Duration, start time.Time, culprit int) *Job {
	if pp <= 0 {
		pp = 1
	}
	for nodes%pp != 0 {
		pp--
	}
	return &Job{Name: name, nodes: nodes, pp: pp, step: step, start: start, Culprit: culprit}
}

// Inject makes the culprit stop: it never issues the next step, which every other rank
// issues and then waits in. It returns the fault's time: the culprit's last progress.
func (j *Job) Inject(now time.Time) time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.faultStep = int64(now.Sub(j.start)/j.step) + 1
	return j.start.Add(time.Duration(j.faultStep) * j.step)
}

// NodeName names node n.
func NodeName(n int) string { return fmt.Sprintf("node%05d", n) }

// comm describes one communicator of a rank: its identity, size, rank in it and ops per step.
type comm struct {
	id     string
	nranks int
	rank   int
	ops    []snapshot.Op // per-step signature
	peer   int           // pipeline peer (p2p), -1 for none
}

var (
	tpOps = []snapshot.Op{{Op: "AllGather", Count: 4194304, Dtype: "bfloat16"}, {Op: "ReduceScatter", Count: 4194304, Dtype: "bfloat16", Red: "sum"},
		{Op: "AllGather", Count: 4194304, Dtype: "bfloat16"}, {Op: "ReduceScatter", Count: 4194304, Dtype: "bfloat16", Red: "sum"},
		{Op: "AllReduce", Count: 8192, Dtype: "float32", Red: "sum"}}
	dpOps = []snapshot.Op{{Op: "AllReduce", Count: 26214400, Dtype: "bfloat16", Red: "sum"}, {Op: "AllReduce", Count: 26214400, Dtype: "bfloat16", Red: "sum"},
		{Op: "AllReduce", Count: 13107200, Dtype: "bfloat16", Red: "sum"}, {Op: "AllReduce", Count: 6553600, Dtype: "bfloat16", Red: "sum"}}
	worldOps = []snapshot.Op{{Op: "AllReduce", Count: 1, Dtype: "float32", Red: "sum"}}
)

// CommsPerRank is how many communicators each rank holds.
const CommsPerRank = 4

func (j *Job) comms(rank int) []comm {
	node, local := rank/8, rank%8
	perStage := j.nodes / j.pp
	stage := node / perStage
	return []comm{
		{id: "0xfeedface", nranks: j.nodes * 8, rank: rank, ops: worldOps, peer: -1},
		{id: "0xfeedface/s1c" + strconv.Itoa(node), nranks: 8, rank: local, ops: tpOps, peer: -1},
		{id: "0xfeedface/s2c" + strconv.Itoa(stage*8+local), nranks: perStage, rank: node % perStage, ops: dpOps, peer: -1},
		{id: "0xfeedface/s3c" + strconv.Itoa((node%perStage)*8+local), nranks: j.pp, rank: stage, peer: pipelinePeer(stage, j.pp)},
	}
}

func pipelinePeer(stage, pp int) int {
	if pp < 2 {
		return -1
	}
	if stage+1 < pp {
		return stage + 1
	}
	return stage - 1
}

// steps says how many steps a rank has completed issuing at now.
func (j *Job) steps(rank int, now time.Time) int64 {
	j.mu.Lock()
	f := j.faultStep
	j.mu.Unlock()
	s := int64(now.Sub(j.start) / j.step)
	if f > 0 {
		limit := f // everyone issued step f, then waits
		if rank == j.Culprit {
			limit = f - 1
		}
		s = min(s, limit)
	}
	return s
}

// Sent is, per communicator, the count a node's previous snapshot carried.
type Sent map[string]int64

// Node renders node's snapshot at now; each communicator carries the ops issued since the
// previous snapshot (sent, nil for none), at least the newest 4 and at most 32, and the
// marks since then, as the real sidecar does. It returns what this snapshot sent.
func (j *Job) Node(node int, now time.Time, sent Sent) (*snapshot.Node, Sent) {
	next := Sent{}
	n := &snapshot.Node{Job: j.Name, Node: NodeName(node), Time: snapshot.MicrosOf(now), Started: snapshot.MicrosOf(j.start)}
	j.mu.Lock()
	faulted := j.faultStep > 0
	j.mu.Unlock()
	for local := 0; local < 8; local++ {
		rank := node*8 + local
		steps := j.steps(rank, now)
		p := snapshot.Process{Host: NodeName(node), PID: 10000 + local, Rank: rank, LocalRank: local, CudaDev: local,
			BusID: fmt.Sprintf("%x000", 0x18+local), State: snapshot.ProcRunning, NCCL: "2.28.9", Timestamps: true, TSDigits: 6}
		for _, c := range j.comms(rank) {
			sc := snapshot.Comm{ID: c.id, Ptr: fmt.Sprintf("0x%x", len(p.Comms)+1), Rank: c.rank, NRanks: c.nranks, State: snapshot.CommReady}
			if len(c.ops) > 0 {
				per := int64(len(c.ops))
				sc.Count = steps * per
				from := max(sent[c.id], sc.Count-32)
				from = min(from, sc.Count-4) // at least the newest 4, like the sidecar
				for seq := max(from+1, 1); seq <= sc.Count; seq++ {
					sc.Recent = append(sc.Recent, j.op(c, rank, seq, per))
				}
				if len(sc.Recent) > 0 {
					last := sc.Recent[len(sc.Recent)-1]
					sc.Last = &last
				}
				// Marks: those since the previous snapshot, and the newest (as the sidecar does).
				for m := sc.Count / 16 * 16; m > 0 && m > sc.Count-64; m -= 16 {
					if m <= sent[c.id] && len(sc.Marks) > 0 {
						break
					}
					sc.Marks = append(snapshot.Marks{{Seq: m, Digest: digest(c.id, m), T: j.op(c, rank, m, per).T}}, sc.Marks...)
				}
				next[c.id] = sc.Count
			} else if c.peer >= 0 {
				t := snapshot.MicrosOf(j.start.Add(time.Duration(steps) * j.step))
				sc.P2P = []snapshot.P2P{{Peer: c.peer, Sends: steps, Recvs: steps, LastSend: t, LastRecv: t}}
			}
			p.Comms = append(p.Comms, sc)
		}
		switch {
		case faulted && rank == j.Culprit:
			p.GPUState = snapshot.GPUIdle
		case faulted:
			p.GPUState = snapshot.GPUWaiting
		default:
			p.GPUState = snapshot.GPUComputing
		}
		n.Processes = append(n.Processes, p)
	}
	sec := int(now.Sub(j.start) / time.Second)
	for g := 0; g < 8; g++ {
		// Samples move a little every second: power, temperature, utilisation.
		v := (node*31 + g*7 + sec*13) % 17
		n.GPUs = append(n.GPUs, snapshot.GPU{Index: g, BusID: fmt.Sprintf("%x000", 0x18+g), T: n.Time, Util: 90 + v%10, MemUtil: 40 + v,
			PowerW: 600 + float64(v)*3.5, PowerLimitW: 700, SMClockMHz: 1980, SMMaxMHz: 1980, TempC: 60 + v%5, State: n.Processes[g].GPUState})
	}
	for h := 0; h < 8; h++ {
		n.Ports = append(n.Ports, snapshot.Port{Kind: "ib", Device: fmt.Sprintf("mlx5_%d", h), Port: 1, State: "ACTIVE", PhysState: "LinkUp",
			RateGbps: 400, Width: "4X", Speed: "NDR", T: n.Time})
	}
	return n, next
}

// op is the seq-th op of a communicator on a rank, timed within its step: ranks log one op
// within a few milliseconds of each other.
func (j *Job) op(c comm, rank int, seq, per int64) snapshot.Op {
	o := c.ops[(seq-1)%per]
	o.Seq = seq
	stepIdx := (seq - 1) / per
	within := time.Duration((seq-1)%per) * j.step / time.Duration(per+1)
	jitter := time.Duration((int64(rank)*7919+seq*104729)%3000) * time.Microsecond
	o.T = snapshot.MicrosOf(j.start.Add(time.Duration(stepIdx)*j.step + within + jitter))
	return o
}

func digest(id string, seq int64) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", id, seq)
	return strconv.FormatUint(h.Sum64(), 16)
}
