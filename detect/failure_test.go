package detect

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// offlineJob is a post-mortem job of two hosts, two ranks each, with logged addresses and
// HCAs; ev adds events to a rank.
func offlineJob(ev map[int][]snapshot.Event) *Job {
	var procs []*Proc
	for r := 0; r < 4; r++ {
		host := []string{"gpu-a", "gpu-a", "gpu-b", "gpu-b"}[r]
		ip := []string{"10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"}[r]
		p := rank(r, 10, 100*time.Millisecond, 0, nil)
		p.Host, p.Node, p.LocalRank = host, host, r%2
		p.Addrs = []string{ip}
		p.Network = "IB"
		p.NetDevs = []string{"mlx5_0:1/IB", "mlx5_3:1/IB"}
		p.Events = ev[r]
		procs = append(procs, p)
	}
	j := job(10*time.Second, procs...)
	j.Offline = true
	return j
}

func evaluate(j *Job) []Finding { return Evaluate(j, DefaultConfig(), TimingOK).Findings }

func wantOne(t *testing.T, fs []Finding, kind incident.Kind, say ...string) Finding {
	t.Helper()
	if len(fs) != 1 || fs[0].Kind != kind {
		t.Fatalf("want one %s finding, got %d: %+v", kind, len(fs), fs)
	}
	for _, s := range say {
		if !strings.Contains(fs[0].Summary, s) {
			t.Errorf("summary %q lacks %q", fs[0].Summary, s)
		}
	}
	return fs[0]
}

func TestIBCompletionByStatus(t *testing.T) {
	cqe := func(code int, peer string, stage snapshot.Stage) snapshot.Event {
		return snapshot.Event{Kind: snapshot.EventIBCompletion, Code: code, Peer: peer, Dev: "mlx5_3", Fatal: true, Stage: stage,
			Msg: "NET/IB: Got completion from peer " + peer + " with status=" + snapshot.IBStatusName(code)}
	}
	t.Run("retry exceeded mid-run names the reporter's HCA port and the peer's host", func(t *testing.T) {
		f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{2: {cqe(12, "10.0.0.1<4000>", snapshot.StageRun)}})),
			incident.KindLink, "RETRY_EXC", "gpu-a (10.0.0.1<4000>)", "link or the fabric")
		if c := f.Culprits[0]; c.Rank != 2 || c.Host != "gpu-b" || c.Port != "mlx5_3:1" {
			t.Errorf("culprit %+v", c)
		}
	})
	t.Run("retry exceeded before any op means RDMA never worked", func(t *testing.T) {
		wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{2: {cqe(12, "10.0.0.1<4000>", snapshot.StageInit)}})),
			incident.KindLink, "NCCL_IB_GID_INDEX")
	})
	t.Run("two hosts blaming one peer name the peer", func(t *testing.T) {
		j := offlineJob(map[int][]snapshot.Event{0: {cqe(12, "10.0.0.9<1>", snapshot.StageRun)}, 2: {cqe(12, "10.0.0.9<2>", snapshot.StageRun)}})
		j.Procs[3].Addrs, j.Procs[3].Host = []string{"10.0.0.9"}, "gpu-c"
		j = NewJob("j", j.Now, j.Procs, nil)
		j.Offline = true
		f := wantOne(t, evaluate(j), incident.KindLink, "2 hosts")
		if f.Culprits[0].Host != "gpu-c" {
			t.Errorf("culprit %+v, want the peer gpu-c", f.Culprits)
		}
	})
	t.Run("local protection error is GPUDirect RDMA and ACS", func(t *testing.T) {
		f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{1: {cqe(4, "10.0.0.2<9>", snapshot.StageFirst)}})),
			incident.KindLink, "ACS", "NCCL_NET_GDR_LEVEL=0")
		if f.Culprits[0].Rank != 1 {
			t.Errorf("culprit %+v", f.Culprits)
		}
	})
	t.Run("local protection error after progress is not ACS", func(t *testing.T) {
		f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{1: {cqe(4, "10.0.0.2<9>", snapshot.StageRun)}})),
			incident.KindLink, "after the job had run for a while", "would have failed the first transfer", "memory registration")
		if strings.Contains(f.Summary, "GPUDirect RDMA is broken") {
			t.Errorf("summary still blames ACS: %q", f.Summary)
		}
	})
	t.Run("a peer whose queue pair failed explains the completion errors with it", func(t *testing.T) {
		qp := snapshot.Event{Kind: snapshot.EventIBAsync, Dev: "mlx5_0", Port: 1, Fatal: true, Detail: "local access violation work queue error",
			Msg: "NET/IB : mlx5_0:1 async fatal event on QP (0x1): local access violation work queue error"}
		f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{2: {qp}, 0: {cqe(9, "10.0.0.2<9>", snapshot.StageRun)}})),
			incident.KindLink, "queue pair (QP)", "gpu-b", "access violation")
		if f.Culprits[0].Host != "gpu-b" || len(f.Evidence) != 2 || !strings.Contains(f.Evidence[1], "consequence") {
			t.Errorf("culprit %+v evidence %q", f.Culprits, f.Evidence)
		}
	})
	t.Run("a port event stays a port event", func(t *testing.T) {
		pe := snapshot.Event{Kind: snapshot.EventIBAsync, Dev: "mlx5_0", Port: 1, Fatal: true, Detail: "port error", Msg: "NET/IB : mlx5_0:1 Got async event : port error"}
		wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{2: {pe}})), incident.KindLink, "IB port event")
	})
	t.Run("remote access error names the peer", func(t *testing.T) {
		f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{1: {cqe(10, "10.0.0.2<9>", snapshot.StageRun)}})),
			incident.KindLink, "refused")
		if f.Culprits[0].Host != "gpu-b" {
			t.Errorf("culprit %+v", f.Culprits)
		}
	})
	t.Run("flushes follow the first error and never name a culprit of their own", func(t *testing.T) {
		f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{
			0: {cqe(5, "10.0.0.2<9>", snapshot.StageRun), cqe(5, "10.0.0.2<9>", snapshot.StageRun)},
			2: {cqe(12, "10.0.0.1<7>", snapshot.StageRun)}})), incident.KindLink, "RETRY_EXC")
		if f.Culprits[0].Rank != 2 || !strings.Contains(strings.Join(f.Evidence, "\n"), "flushed") {
			t.Errorf("culprit %+v evidence %q", f.Culprits, f.Evidence)
		}
	})
	t.Run("flushes alone say the cause is elsewhere", func(t *testing.T) {
		f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{0: {cqe(5, "10.0.0.2<9>", snapshot.StageRun)}})),
			incident.KindLink, "consequence")
		if len(f.Culprits) != 0 || f.Severity != incident.SeverityWarning {
			t.Errorf("culprits %+v severity %s", f.Culprits, f.Severity)
		}
	})
}

func TestConnections(t *testing.T) {
	t.Run("a connect that failed at init is the network's setup", func(t *testing.T) {
		f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{1: {{Kind: snapshot.EventSocketConnect, Fatal: true,
			Peer: "10.0.0.2<41234>", Detail: "No route to host", Stage: snapshot.StageInit, Msg: "socketStartConnect: Connect to 10.0.0.2<41234> failed : No route to host"}}})),
			incident.KindConfig, "could not connect to gpu-b", "NCCL_SOCKET_IFNAME")
		if f.Culprits[0].Host != "gpu-b" {
			t.Errorf("culprit %+v", f.Culprits)
		}
	})
	t.Run("loopback means the wrong interface", func(t *testing.T) {
		wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{1: {{Kind: snapshot.EventSocketConnect, Fatal: true,
			Peer: "127.0.0.1<45069>", Detail: "Software caused connection abort", Stage: snapshot.StageInit}}})),
			incident.KindConfig, "loopback")
	})
	t.Run("a connection closed mid-run names the peer that died", func(t *testing.T) {
		j := offlineJob(map[int][]snapshot.Event{0: {{Kind: snapshot.EventConnClosedRemote, Peer: "gpu-b<42830>", Stage: snapshot.StageRun}}})
		f := wantOne(t, evaluate(j), incident.KindCrash, "gpu-b (ranks 2,3)", "mid-run")
		if f.Culprits[0].Host != "gpu-b" {
			t.Errorf("culprit %+v", f.Culprits)
		}
	})
	t.Run("retries that succeeded are no finding", func(t *testing.T) {
		if fs := evaluate(offlineJob(map[int][]snapshot.Event{1: {{Kind: snapshot.EventSocketConnect, Detail: "Connection refused", Stage: snapshot.StageInit}}})); len(fs) != 0 {
			t.Fatalf("%+v", fs)
		}
	})
}

func TestSetupAndCUDA(t *testing.T) {
	for _, c := range []struct {
		name string
		rank int
		ev   snapshot.Event
		kind incident.Kind
		say  string
	}{
		{"duplicate GPU", 1, snapshot.Event{Kind: snapshot.EventDuplicateGPU, Ranks: []int{1, 0}, Detail: "1b000", Fatal: true}, incident.KindConfig, "share one GPU"},
		{"version mismatch", 2, snapshot.Event{Kind: snapshot.EventVersionMismatch, Ranks: []int{2, 0}, Detail: "21903 22105", Fatal: true}, incident.KindConfig, "different NCCL versions"},
		{"shm too small", 3, snapshot.Event{Kind: snapshot.EventShmError, Fatal: true}, incident.KindConfig, "--shm-size"},
		{"shm not shared", 3, snapshot.Event{Kind: snapshot.EventShmError, Code: snapshot.ShmAttach, Fatal: true}, incident.KindConfig, "IPC namespace"},
		{"no interface", 0, snapshot.Event{Kind: snapshot.EventNoInterface, Fatal: true}, incident.KindConfig, "NCCL_SOCKET_IFNAME"},
		{"qp cannot connect", 0, snapshot.Event{Kind: snapshot.EventIBSetup, Detail: "ibv_modify_qp", Dev: "mlx5_0", Fatal: true}, incident.KindLink, "NCCL_CROSS_NIC=0"},
		{"cuda oom", 2, snapshot.Event{Kind: snapshot.EventCudaError, Detail: "out of memory", Fatal: true, Stage: snapshot.StageRun}, incident.KindGPU, "ran out of memory"},
		{"fabric manager", 2, snapshot.Event{Kind: snapshot.EventCudaError, Detail: "system not yet initialized", Fatal: true}, incident.KindGPU, "fabricmanager"},
		{"nvls", 2, snapshot.Event{Kind: snapshot.EventCudaError, Detail: "invalid argument", Src: "transport/nvls.cc", Fatal: true}, incident.KindGPU, "NCCL_NVLS_ENABLE=0"},
		{"nvls other state", 2, snapshot.Event{Kind: snapshot.EventCudaError, Detail: "the operation cannot be performed in the present state", Src: "transport/nvls.cc", Fatal: true}, incident.KindGPU, "NCCL_NVLS_ENABLE=0"},
		{"nvls init error", 1, snapshot.Event{Kind: snapshot.EventCudaError, Detail: "initialization error", Src: "transport/nvls.cc", Fatal: true}, incident.KindGPU, "NVLink SHARP"},
		{"nvml missing", 1, snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnNVMLMissing, Detail: "Not Found", Fatal: true}, incident.KindConfig, "NVML cannot find"},
		{"bus error in nccl", 3, snapshot.Event{Kind: snapshot.EventSignal, Code: 7, Detail: "Bus error: nonexistent physical address", Peer: "ncclGroupEnd()", Fatal: true}, incident.KindConfig, "--shm-size"},
		{"sharp group", 0, snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnCollNet, Msg: "SHARP group create: Streaming Tree lock failed (-18)"}, incident.KindConfig, "NCCL_COLLNET_ENABLE=0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{c.rank: {c.ev}})), c.kind, c.say)
			if f.Culprits[0].Rank != c.rank {
				t.Errorf("culprit %+v, want rank %d", f.Culprits, c.rank)
			}
		})
	}
	t.Run("version lines that differ", func(t *testing.T) {
		j := offlineJob(nil)
		for _, p := range j.Procs {
			p.NCCL = "2.21.5"
		}
		j.Procs[3].NCCL = "2.18.1"
		f := wantOne(t, evaluate(j), incident.KindConfig, "2.18.1")
		if f.Culprits[0].Rank != 3 {
			t.Errorf("culprit %+v", f.Culprits)
		}
	})
}

// TestTeardownIsEvidence: the survivors' "Connection closed by localRank N" and closed
// sockets after an error are that error's consequences, and a local rank whose own log is
// missing is named from its host's other ranks.
func TestTeardownIsEvidence(t *testing.T) {
	closed := func(lr int) snapshot.Event {
		return snapshot.Event{Kind: snapshot.EventConnClosedLocal, LocalRank: lr, Stage: snapshot.StageRun}
	}
	t.Run("dead local rank without its log", func(t *testing.T) {
		j := offlineJob(map[int][]snapshot.Event{2: {closed(1), {Kind: snapshot.EventLauncherExit, Code: -9, LocalRank: 1, PID: 5555}}})
		j.Procs = j.Procs[:3] // rank 3's log is missing
		j = NewJob("j", j.Now, j.Procs, nil)
		j.Offline = true
		f := wantOne(t, evaluate(j), incident.KindCrash, "rank 3 (gpu-b local rank 1, no log)")
		if f.Culprits[0].Rank != 3 || f.Culprits[0].Host != "gpu-b" || !strings.Contains(strings.Join(f.Evidence, " "), "SIGKILL") {
			t.Errorf("culprit %+v evidence %q", f.Culprits, f.Evidence)
		}
	})
	t.Run("closures alone are how a job ends", func(t *testing.T) {
		if fs := evaluate(offlineJob(map[int][]snapshot.Event{0: {closed(1)}, 2: {closed(1)}})); len(fs) != 0 {
			t.Fatalf("%+v", fs)
		}
	})
	t.Run("after an IB error the closures are its evidence", func(t *testing.T) {
		j := offlineJob(map[int][]snapshot.Event{
			2: {{Kind: snapshot.EventIBCompletion, Code: 4, Peer: "10.0.0.1<1>", Dev: "mlx5_0", Stage: snapshot.StageRun, Fatal: true}},
			3: {closed(0)},
			0: {{Kind: snapshot.EventConnClosedRemote, Peer: "gpu-b<99>", Stage: snapshot.StageRun}}})
		f := wantOne(t, evaluate(j), incident.KindLink, "LOC_PROT")
		if f.Culprits[0].Rank != 2 {
			t.Errorf("culprit %+v", f.Culprits)
		}
	})
}

func TestRASMismatch(t *testing.T) {
	node := func(counts map[int]int64, dead ...int) *snapshot.Node {
		return &snapshot.Node{Node: "ras", RAS: &snapshot.RAS{Format: "json", Comms: []snapshot.RASComm{{Hash: "0xc0ffee", Size: 4,
			Funcs: map[string]map[int]int64{"AllReduce": counts}, Dead: dead}}}}
	}
	j := offlineJob(nil)
	for _, p := range j.Procs {
		p.Comms = nil // no COLL lines: only RAS can tell
	}
	procs := j.Procs
	commOf := func(j *Job) {
		for i, p := range procs {
			p.Comms = []snapshot.Comm{{ID: "0xc0ffee", Rank: i, NRanks: 4, State: snapshot.CommReady}}
		}
	}
	commOf(j)
	t.Run("one op apart is a running job", func(t *testing.T) {
		j := NewJob("j", j.Now, procs, map[string]*snapshot.Node{"r": node(map[int]int64{0: 8, 1: 8, 2: 7, 3: 8})})
		j.Offline = true
		if fs := evaluate(j); len(fs) != 0 {
			t.Fatalf("%+v", fs)
		}
	})
	t.Run("ranks behind by more name their process", func(t *testing.T) {
		j := NewJob("j", j.Now, procs, map[string]*snapshot.Node{"r": node(map[int]int64{0: 80, 1: 80, 2: 61, 3: 80})})
		j.Offline = true
		f := wantOne(t, evaluate(j), incident.KindHang, "RAS", "rank 2 (gpu-b")
		if f.Culprits[0].Rank != 2 {
			t.Errorf("culprit %+v", f.Culprits)
		}
	})
	t.Run("a rank whose GPU has not started its issued op is not behind", func(t *testing.T) {
		// The plugin: rank 2 issued collective 62 and its GPU runs something else first; RAS
		// counts launches and so sees it behind. Rank 3 issued nothing more: it is.
		ps := make([]*Proc, len(procs))
		for i, p := range procs {
			c := *p
			c.Comms = []snapshot.Comm{{ID: "0xc0ffee", Rank: i, NRanks: 4, State: snapshot.CommReady,
				Done: &snapshot.Completion{Issued: 62, Done: 61}}}
			ps[i] = &c
		}
		ps[2].Comms[0].Done.InFlight = &snapshot.Flight{Op: snapshot.Op{Seq: 62, Op: "AllReduce"}}
		j := NewJob("j", j.Now, ps, map[string]*snapshot.Node{"r": node(map[int]int64{0: 80, 1: 80, 2: 61, 3: 61})})
		j.Offline = true
		f := wantOne(t, evaluate(j), incident.KindHang, "RAS", "rank 3 (")
		if f.Culprits[0].Rank != 3 {
			t.Errorf("culprit %+v", f.Culprits)
		}
	})
	t.Run("dead ranks crashed", func(t *testing.T) {
		j := NewJob("j", j.Now, procs, map[string]*snapshot.Node{"r": node(map[int]int64{0: 8, 1: 8, 2: 8, 3: 8}, 1)})
		j.Offline = true
		f := wantOne(t, evaluate(j), incident.KindCrash, "dead")
		if f.Culprits[0].Rank != 1 {
			t.Errorf("culprit %+v", f.Culprits)
		}
	})
}

// TestRASNamesTheSplitChildBehind: RAS names rank 1 of a two-rank communicator by a hash
// the logs never print (a split child). Of the job's two-rank communicators, only {0,2} has
// its rank 1 (global rank 2) behind in the logs as well: that is the process.
func TestRASNamesTheSplitChildBehind(t *testing.T) {
	var procs []*Proc
	for r := range 4 {
		count := int64(105)
		if r == 2 {
			count = 100
		}
		procs = append(procs, &Proc{Node: "vm", Process: snapshot.Process{Host: "vm", PID: 100 + r, Rank: r, CudaDev: -1,
			Comms: []snapshot.Comm{{ID: fmt.Sprintf("0xabc/s3c%d", r%2), Rank: r / 2, NRanks: 2, Count: count, State: snapshot.CommReady}}}})
	}
	ras := &snapshot.Node{Node: "vm", RAS: &snapshot.RAS{Format: "json", Comms: []snapshot.RASComm{{Hash: "0x1f659be212645516",
		Size: 2, Funcs: map[string]map[int]int64{"AllReduce": {0: 105, 1: 100}}}}}}
	j := NewJob("j", t0.Add(time.Minute), procs, map[string]*snapshot.Node{"vm": ras})
	j.Offline = true
	f := wantOne(t, evaluate(j), incident.KindHang, "rank 2 (vm pid 102)")
	if f.Culprits[0].Rank != 2 {
		t.Errorf("culprit %+v", f.Culprits)
	}
}

// TestRASStragglerIsNotAHang: live, rank 1 arrives 0.2 s late at every step, so RAS sees it
// a few launches behind on both communicators; it issued its last collective 0.1 s ago and
// keeps its pace (seen on two H200s: a straggler paged as a hang). Once it has issued nothing
// for longer than its pace allows, the same report is a hang.
func TestRASStragglerIsNotAHang(t *testing.T) {
	now := t0.Add(time.Minute)
	procs := func(lastAgo time.Duration) []*Proc {
		var ps []*Proc
		for r := range 2 {
			var c snapshot.Comm
			for _, id := range []string{"0xaa", "0xbb"} {
				c = snapshot.Comm{ID: id, Rank: r, NRanks: 2, Count: 40, State: snapshot.CommReady}
				for k := range 40 {
					at := now.Add(-lastAgo - time.Duration(39-k)*350*time.Millisecond)
					c.Recent = append(c.Recent, snapshot.Op{Seq: int64(k + 1), Op: "AllReduce", Count: 8, Dtype: "float32", T: snapshot.MicrosOf(at)})
				}
				last := c.Recent[39]
				c.Last = &last
				if len(ps) == r {
					ps = append(ps, &Proc{Node: "vm", Process: snapshot.Process{Host: "vm", PID: 100 + r, Rank: r, CudaDev: -1,
						State: snapshot.ProcRunning}})
				}
				ps[r].Comms = append(ps[r].Comms, c)
			}
		}
		return ps
	}
	ras := &snapshot.Node{Node: "vm", RAS: &snapshot.RAS{Format: "json", Comms: []snapshot.RASComm{
		{Hash: "0xaa", Size: 2, Funcs: map[string]map[int]int64{"AllReduce": {0: 41, 1: 40}}},
		{Hash: "0xbb", Size: 2, Funcs: map[string]map[int]int64{"AllReduce": {0: 41, 1: 40}}}}}}
	j := NewJob("j", now, procs(100*time.Millisecond), map[string]*snapshot.Node{"vm": ras})
	if fs := RAS(j, DefaultConfig()); len(fs) != 0 {
		t.Fatalf("a rank still issuing at its pace is not hung: %+v", fs)
	}
	j = NewJob("j", now, procs(3*time.Second), map[string]*snapshot.Node{"vm": ras})
	if fs := RAS(j, DefaultConfig()); len(fs) != 1 || fs[0].Culprits[0].Rank != 1 {
		t.Fatalf("3 s without a collective at a 0.35 s pace: want rank 1's hang, got %+v", fs)
	}
}

// TestTorchSuspects: PyTorch lines alone; the ranks whose last completed work is lowest
// are the suspects, the waiting ones are not.
func TestTorchSuspects(t *testing.T) {
	var procs []*Proc
	for r := 0; r < 4; r++ {
		done := int64(807)
		if r == 3 {
			done = 806
		}
		procs = append(procs, &Proc{Process: snapshot.Process{Host: "?", Rank: r, LocalRank: -1, CudaDev: -1, PID: 0,
			Events: []snapshot.Event{{Kind: snapshot.EventTorchTimeout, Code: int(done + 1), Msg: "timeout"},
				{Kind: snapshot.EventTorchWorkStatus, Code: int(done), Enqueued: done + 3, Comm: "0"}}}})
		procs[r].PID = 0
	}
	// Distinct keys: one process per rank.
	for i, p := range procs {
		p.Host = "h" + string(rune('0'+i))
	}
	j := NewJob("j", t0, procs, nil)
	j.Offline = true
	f := wantOne(t, evaluate(j), incident.KindHang, "rank 3 completed work only up to 806", "suspect")
	if len(f.Culprits) != 1 || f.Culprits[0].Rank != 3 {
		t.Errorf("culprits %+v", f.Culprits)
	}
	for _, p := range procs {
		p.Events[1].Code = 807
	}
	f = wantOne(t, evaluate(j), incident.KindHang, "only waiting")
	if len(f.Culprits) != 0 {
		t.Errorf("a waiting rank named: %+v", f.Culprits)
	}
}

func TestP2PUnmatchedInAFinishedJob(t *testing.T) {
	a, b := rank(0, 5, 100*time.Millisecond, 0, nil), rank(1, 5, 100*time.Millisecond, 0, nil)
	a.Comms[0].P2P = []snapshot.P2P{{Peer: 1, Sends: 12}}
	b.Comms[0].P2P = []snapshot.P2P{{Peer: 0, Recvs: 11}}
	a.Comms[0].State, b.Comms[0].State = snapshot.CommDestroyed, snapshot.CommDestroyed
	j := job(30*time.Second, a, b)
	j.Offline = true
	f := only(t, P2PMismatch(j, DefaultConfig()), incident.KindP2PMismatch)
	if f.Culprits[0].Rank != 1 || f.Severity != incident.SeverityWarning || !strings.Contains(f.Summary, "never received") {
		t.Fatalf("%+v", f)
	}
}

func TestStoreFailures(t *testing.T) {
	store := func(waiter, root int, reason string) *Proc {
		return &Proc{Process: snapshot.Process{Host: "?", Rank: waiter, LocalRank: -1, CudaDev: -1,
			Events: []snapshot.Event{{Kind: snapshot.EventTorchStore, Ranks: []int{root}, Detail: reason}}}}
	}
	for _, c := range []struct {
		reason string
		kind   incident.Kind
	}{{"Connection reset by peer", incident.KindCrash}, {"Socket Timeout", incident.KindHang}} {
		a, b := store(3, 0, c.reason), store(5, 0, c.reason)
		a.Host, b.Host = "h3", "h5"
		j := NewJob("j", t0, []*Proc{a, b}, nil)
		j.Offline = true
		f := wantOne(t, evaluate(j), c.kind, "rank 0", "unique id")
		if f.Culprits[0].Rank != 0 || f.Victims != 2 {
			t.Errorf("%s: culprits %+v victims %d", c.reason, f.Culprits, f.Victims)
		}
	}
}

// TestRASUnmappedStragglerIsNotAHang: live on one H100 (4 ranks, straggler on rank 1), RAS
// reported rank 0 of a split child five launches behind. Communicators of that size hold
// different processes at rank 0, so no process could be named, and the rank was paged as
// hung while every candidate went on issuing collectives. Once they stop, it is a hang.
func TestRASUnmappedStragglerIsNotAHang(t *testing.T) {
	now := t0.Add(time.Minute)
	procs := func(lastAgo time.Duration) []*Proc {
		ps := []*Proc{{Node: "vm", Process: snapshot.Process{Host: "vm", PID: 100, Rank: 0, CudaDev: -1, State: snapshot.ProcRunning}},
			{Node: "vm", Process: snapshot.Process{Host: "vm", PID: 101, Rank: 1, CudaDev: -1, State: snapshot.ProcRunning}}}
		// Two logged communicators of two ranks, numbered the other way round in the second.
		for _, comm := range []struct {
			id    string
			order []int
		}{{"0xaa", []int{0, 1}}, {"0xbb", []int{1, 0}}} {
			id := comm.id
			for commRank, p := range comm.order {
				c := snapshot.Comm{ID: id, Rank: commRank, NRanks: 2, Count: 40, State: snapshot.CommReady}
				for k := range 40 {
					at := now.Add(-lastAgo - time.Duration(39-k)*350*time.Millisecond)
					c.Recent = append(c.Recent, snapshot.Op{Seq: int64(k + 1), Op: "AllReduce", Count: 8, Dtype: "float32", T: snapshot.MicrosOf(at)})
				}
				last := c.Recent[39]
				c.Last = &last
				ps[p].Comms = append(ps[p].Comms, c)
			}
		}
		return ps
	}
	ras := &snapshot.Node{Node: "vm", RAS: &snapshot.RAS{Format: "json", Comms: []snapshot.RASComm{
		{Hash: "0xcc", Size: 2, Funcs: map[string]map[int]int64{"AllReduce": {0: 370, 1: 375}}}}}}
	j := NewJob("j", now, procs(100*time.Millisecond), map[string]*snapshot.Node{"vm": ras})
	if fs := RAS(j, DefaultConfig()); len(fs) != 0 {
		t.Fatalf("every process that could be rank 0 is still issuing: no hang, got %+v", fs)
	}
	j = NewJob("j", now, procs(3*time.Second), map[string]*snapshot.Node{"vm": ras})
	if fs := RAS(j, DefaultConfig()); len(fs) != 1 || fs[0].Kind != incident.KindHang || fs[0].Culprits[0].Rank != -1 {
		t.Fatalf("3 s without a collective: want the unmapped rank's hang, got %+v", fs)
	}
}

// TestNetSizeMismatchByTransport: NET/IB's "collective mismatch error" is traced to the
// transport or settings; NET/Socket's "message truncated" names the ranks' calls too (a
// pipeline stage that sends another shape than its peer receives), and is not called NET/IB.
func TestNetSizeMismatchByTransport(t *testing.T) {
	for _, c := range []struct {
		msg      string
		say, not string
	}{
		{"NET/IB : collective mismatch error, local size 1048576 remote size 524288", "NET/IB on", "calls differ"},
		{"NET/Socket : peer 10.0.0.2<41138> message truncated : receiving 8 bytes instead of 4. If you believe your socket network is in a healthy state, there may be a mismatch in collective sizes", "NET/Socket on", "NET/IB"},
	} {
		j := offlineJob(map[int][]snapshot.Event{1: {{Kind: snapshot.EventNetSizeMismatch, Fatal: true, Peer: "10.0.0.2<41138>", Msg: c.msg}}})
		f := wantOne(t, Messages(j, DefaultConfig()), incident.KindLink, c.say)
		if strings.Contains(f.Summary, c.not) {
			t.Errorf("summary %q should not say %q", f.Summary, c.not)
		}
	}
}

// TestInitLogEndsAtInit: offline, a rank whose log stops a second after Init START, with
// nothing after it, may have hung, died or been cut: the finding keeps the missing rank and
// says so; a log that goes on for minutes is a hang as before.
func TestInitLogEndsAtInit(t *testing.T) {
	for _, c := range []struct {
		after time.Duration
		hedge bool
	}{{time.Second, true}, {5 * time.Minute, false}} {
		start := snapshot.MicrosOf(t0)
		p := &Proc{Process: snapshot.Process{Host: "h0", PID: 7, Rank: 0, LocalRank: -1, CudaDev: -1,
			LastLine: snapshot.MicrosOf(t0.Add(c.after)),
			Comms:    []snapshot.Comm{{ID: "0xabc", Ptr: "0x1", Rank: 0, NRanks: 2, State: snapshot.CommInit, InitAt: start}}}}
		j := NewJob("j", t0.Add(time.Hour), []*Proc{p}, nil)
		j.Offline = true
		f := wantOne(t, evaluate(j), incident.KindHang, "ranks 1 never logged joining it")
		if got := strings.Contains(f.Summary, "or the copy was cut"); got != c.hedge {
			t.Errorf("log ends %s after Init START: hedged %v: %q", c.after, got, f.Summary)
		}
	}
}

// TestBrokenConnectionToAPeerWithoutLog: a reset or a timeout seen from one end, with no
// log of the other node, may be a failed network path as well as a process that went away
// (a posted job whose nodes had InfiniBand trouble); a close by the peer is the peer's own.
func TestBrokenConnectionToAPeerWithoutLog(t *testing.T) {
	for _, c := range []struct {
		e     snapshot.Event
		hedge bool
	}{
		{snapshot.Event{Kind: snapshot.EventSocketError, Fatal: true, Peer: "10.9.9.9<33759>", Detail: "Connection reset by peer", Stage: snapshot.StageReady}, true},
		{snapshot.Event{Kind: snapshot.EventConnClosedRemote, Fatal: true, Peer: "10.9.9.9<33759>", Stage: snapshot.StageReady}, false},
		{snapshot.Event{Kind: snapshot.EventSocketError, Fatal: true, Peer: "10.0.0.2<33759>", Detail: "Connection reset by peer", Stage: snapshot.StageReady}, false}, // gpu-b's log is here
	} {
		j := offlineJob(map[int][]snapshot.Event{0: {c.e}})
		fs := Messages(j, DefaultConfig())
		if len(fs) == 0 {
			t.Fatalf("%s: no finding", c.e.Detail)
		}
		if got := strings.Contains(fs[0].Summary, "cannot be ruled out"); got != c.hedge {
			t.Errorf("%s %s to %s: hedged %v, want %v: %s", c.e.Kind, c.e.Detail, c.e.Peer, got, c.hedge, fs[0].Summary)
		}
	}
}
