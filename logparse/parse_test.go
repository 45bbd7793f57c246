package logparse

import (
	"fmt"
	"strings"
	"testing"
)

// got renders the fields of a parsed line that a case cares about, so that each case states
// its expectation as one readable string.
func got(l *Line) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kind=%s", l.Kind)
	if l.Host != nil {
		fmt.Fprintf(&b, " host=%s pid=%d tid=%d dev=%d", l.Host, l.PID, l.TID, l.Dev)
	}
	if l.LauncherRank >= 0 {
		fmt.Fprintf(&b, " lrank=%d", l.LauncherRank)
	}
	if l.HasTime {
		t := l.Time
		fmt.Fprintf(&b, " time=%04d-%02d-%02dT%02d:%02d:%02d.%09d/%d", t.Year, t.Month, t.Day, t.Hour, t.Min, t.Sec, t.Nanos, t.Digits)
	}
	if l.File != nil {
		fmt.Fprintf(&b, " file=%s:%d", l.File, l.FileLn)
	}
	if l.Quoted {
		b.WriteString(" quoted")
	}
	switch l.Kind {
	case KindColl:
		c := l.Coll
		fmt.Fprintf(&b, " op=%s opcount=%x count=%d dt=%s red=%d root=%d comm=%x nranks=%d", c.Op, c.OpCount, c.Count, c.Datatype, c.RedOp, c.Root, c.Comm, c.NRanks)
	case KindInit:
		in := l.Init
		fmt.Fprintf(&b, " api=%s jobrank=%d comm=%x rank=%d nranks=%d cuda=%d nvml=%d bus=%x", in.API, in.JobRank, in.Comm, in.Rank, in.NRanks, in.CudaDev, in.NvmlDev, in.BusID)
		if in.IsSplit {
			fmt.Fprintf(&b, " parent=%x split=%d color=%d key=%d", in.Parent, in.SplitCount, in.Color, in.Key)
		}
		if in.HasCommID {
			fmt.Fprintf(&b, " commid=%x", in.CommID)
		}
		fmt.Fprintf(&b, " phase=%d", l.Phase)
	case KindCommInfo:
		fmt.Fprintf(&b, " comm=%x rank=%d nranks=%d nnodes=%d local=%d", l.Comm, l.Rank, l.NRanks, l.NNodes, l.LocalRk)
	case KindDestroy:
		fmt.Fprintf(&b, " comm=%x rank=%d nranks=%d phase=%d", l.Comm, l.Rank, l.NRanks, l.Phase)
	case KindChannel:
		c := l.Channel
		fmt.Fprintf(&b, " ch=%d %d->%d via=%q", c.Channel, c.From, c.To, c.Transport)
		if c.Net != nil {
			fmt.Fprintf(&b, " net=%q netdev=%d proxy=%d gdr=%t send=%t recv=%t", c.Net, c.NetDev, c.ProxyRank, c.GDR, c.Send, c.Recv)
		}
	case KindIBCompletion:
		fmt.Fprintf(&b, " peer=%s status=%d hca=%s", l.Text, l.Code, l.Dev2)
		if l.Detail != nil {
			fmt.Fprintf(&b, " req=%s", l.Detail)
		}
	case KindSocketConnect, KindSocketError:
		fmt.Fprintf(&b, " peer=%q reason=%q fatal=%t", l.Text, l.Detail, l.Fatal)
	case KindShmError, KindNoInterface, KindSystemError:
		fmt.Fprintf(&b, " code=%d", l.Code)
	case KindDuplicateGPU, KindVersionMismatch:
		fmt.Fprintf(&b, " ranks=%d,%d detail=%q", l.Ranks[0], l.Ranks[1], l.Detail)
	case KindIBSetup:
		fmt.Fprintf(&b, " verb=%q dev=%s port=%d reason=%q fatal=%t", l.Detail, l.Dev2, l.Port, l.Text, l.Fatal)
	case KindProxyError:
		fmt.Fprintf(&b, " rank=%d op=%q code=%d", l.Ranks[0], l.Detail, l.Code)
	case KindCudaError:
		fmt.Fprintf(&b, " code=%d error=%q", l.Code, l.Detail)
		if l.Torch.Watchdog {
			fmt.Fprintf(&b, " watchdog rank=%d", l.Torch.Rank)
		}
	case KindTorchStuck:
		t := l.Torch
		fmt.Fprintf(&b, " rank=%d pg=%s queued=%d stuck=%dms", t.Rank, t.PG, l.Code, t.TimeoutMs)
	case KindTorchStore:
		fmt.Fprintf(&b, " rank=%d reason=%q", l.Ranks[0], l.Detail)
	case KindRankConflict:
		fmt.Fprintf(&b, " rank=%d nranks=%d detail=%q", l.Ranks[0], l.Code, l.Detail)
	case KindTorchNCCLError:
		fmt.Fprintf(&b, " result=%d version=%q", l.Code, l.Text)
	case KindIBAsync:
		fmt.Fprintf(&b, " dev=%s port=%d event=%q code=%d fatal=%t", l.Dev2, l.Port, l.Text, l.Code, l.Fatal)
	case KindConnClosedLocal:
		fmt.Fprintf(&b, " local=%d", l.LocalRk)
	case KindBreadcrumb:
		fmt.Fprintf(&b, " code=%d", l.Code)
	case KindTorchTimeout:
		t := l.Torch
		fmt.Fprintf(&b, " rank=%d seq=%d optype=%s numel=%d/%d timeout=%d ran=%d", t.Rank, t.SeqNum, t.OpType, t.NumelIn, t.NumelOut, t.TimeoutMs, t.RanForMs)
	case KindTorchWorkStatus:
		t := l.Torch
		fmt.Fprintf(&b, " rank=%d pg=%s/%s seq=%d enq=%d done=%d fatal=%t", t.Rank, t.PG, t.PGDesc, t.SeqNum, t.Enqueued, t.Completed, l.Fatal)
		if l.Ranks[0] >= 0 {
			fmt.Fprintf(&b, " from=%d", l.Ranks[0])
		}
	case KindTorchTerminate:
		fmt.Fprintf(&b, " rank=%d", l.Torch.Rank)
	case KindTorchCommCreated:
		fmt.Fprintf(&b, " comm=%x rank=%d", l.Comm, l.Torch.Rank)
	case KindLauncherExit:
		fmt.Fprintf(&b, " code=%d local=%d pid=%d", l.Code, l.LocalRk, l.Torch.PID)
	case KindVersion, KindUsingNetwork, KindNetIBDevices, KindNetSocketDevices, KindBootstrap, KindConnClosedRemote, KindRASPeerDead:
		fmt.Fprintf(&b, " text=%q", l.Text)
	}
	return b.String()
}

// parseLike parses line into l and checks what got renders of it.
func parseLike(t *testing.T, l *Line, line, want string) {
	t.Helper()
	Parse([]byte(line), l)
	if g := got(l); g != want {
		t.Errorf("\n line %q\n got  %s\n want %s", line, g, want)
	}
}

func TestParse(t *testing.T) {
	const p = "node7:41231:41231 [3] NCCL INFO "
	const w = "node7:41231:41873 [3] transport/net_ib.cc:1295 NCCL WARN "
	cases := []struct {
		name, line, want string
	}{
		// Prefix variants.
		{"blank before WARN", "", "kind=blank"},
		{"info 2.18", p + "Using network IB", `kind=using_network host=node7 pid=41231 tid=41231 dev=3 text="IB"`},
		{"warn 2.18", w + "NET/Socket : socket progress error", `kind=socket_error host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 peer="" reason="socket progress error" fatal=false`},
		{"warn 2.30.7 with function", "node7:41231:41873 [3] transport/net_ib/p2p.cc:688 (ncclIbLogCompletionWithError) NCCL WARN NET/IB: Got completion from peer 10.0.12.8<50123> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  hca mlx5_3",
			"kind=ib_completion host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib/p2p.cc:688 peer=10.0.12.8<50123> status=12 hca=mlx5_3"},
		{"trace with ms and func", "node7:41231:41231 [3] 1234.567890 ncclGroupEnd:123 NCCL TRACE something", "kind=info host=node7 pid=41231 tid=41231 dev=3 file=ncclGroupEnd:123"},
		{"call has no dev", "node7:41231:41231 NCCL CALL ncclAllReduce(7f3a5c000000,7f3a5c000000,25690112,9,0,0,0x5618d2c4e0a0,0x5618d2b1c8f0)", "kind=info host=node7 pid=41231 tid=41231 dev=-1"},
		{"default timestamp on WARN 2.26", "[2025-06-01 10:42:17] node7:41231:41873 [3] transport/net_ib.cc:2458 NCCL WARN NET/IB: Got completion from peer 10.0.12.8<50123> with status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_3",
			`kind=ib_completion host=node7 pid=41231 tid=41873 dev=3 time=2025-06-01T10:42:17.000000000/0 file=transport/net_ib.cc:2458 peer=10.0.12.8<50123> status=12 hca=mlx5_3 req=Send`},
		{"µs timestamp (real)", "[2026-11-21 23:00:34.364866] vm:607:607 [0] NCCL INFO Using network Socket", `kind=using_network host=vm pid=607 tid=607 dev=0 time=2026-11-21T23:00:34.364866000/6 text="Socket"`},
		{"ms timestamp", "[2026-11-21 23:00:34.364] vm:607:607 [0] NCCL INFO Using network Socket", `kind=using_network host=vm pid=607 tid=607 dev=0 time=2026-11-21T23:00:34.364000000/3 text="Socket"`},
		{"custom timestamp is opaque", "Nov 21 23:00:34 vm:607:607 [0] NCCL INFO Using network Socket", `kind=using_network host=vm pid=607 tid=607 dev=0 text="Socket"`},
		{"torchrun --tee prefix", "[default3]:node7:41231:41231 [3] NCCL INFO Using network IB", `kind=using_network host=node7 pid=41231 tid=41231 dev=3 lrank=3 text="IB"`},
		{"pytorch rank prefix", "[rank3]:node7:41231:41231 [3] NCCL INFO Using network IB", `kind=using_network host=node7 pid=41231 tid=41231 dev=3 lrank=3 text="IB"`},
		{"srun --label prefix", "12: node7:41231:41231 [3] NCCL INFO Using network IB", `kind=using_network host=node7 pid=41231 tid=41231 dev=3 lrank=12 text="IB"`},
		{"stacked prefixes", "0: [default0]:node7:41231:41231 [3] NCCL INFO Using network IB", `kind=using_network host=node7 pid=41231 tid=41231 dev=3 lrank=0 text="IB"`},
		{"hostname with dashes (2.29 replaces % and /)", "gpu-node-07:5:6 [0] NCCL INFO Using network IB", `kind=using_network host=gpu-node-07 pid=5 tid=6 dev=0 text="IB"`},
		{"CRLF", p + "Using network IB\r", `kind=using_network host=node7 pid=41231 tid=41231 dev=3 text="IB"`},
		{"unknown text", "random text from a training script", "kind=unknown"},

		// Version line.
		{"bare version 2.18 stdout", "NCCL version 2.18.1+cuda12.1", `kind=version text="2.18.1+cuda12.1"`},
		{"info version 2.22+", p + "NCCL version 2.25.1+cuda12.8", `kind=version host=node7 pid=41231 tid=41231 dev=3 text="2.25.1+cuda12.8"`},

		// Init in every form.
		{"init 2.18", p + "comm 0x5618d2c4e0a0 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 5d000 commId 0x8f1c2a77d0e3b41a - Init START",
			"kind=init host=node7 pid=41231 tid=41231 dev=3 api= jobrank=-1 comm=5618d2c4e0a0 rank=3 nranks=16 cuda=3 nvml=3 bus=5d000 commid=8f1c2a77d0e3b41a phase=1"},
		{"init 2.21", p + "ncclCommInitRank comm 0x5618d2c4e0a0 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 5d000 commId 0x8f1c2a77d0e3b41a - Init COMPLETE",
			"kind=init host=node7 pid=41231 tid=41231 dev=3 api=ncclCommInitRank jobrank=-1 comm=5618d2c4e0a0 rank=3 nranks=16 cuda=3 nvml=3 bus=5d000 commid=8f1c2a77d0e3b41a phase=2"},
		{"split 2.21 with commId", p + "ncclCommSplit comm 0x5618d3a11230 rank 1 nranks 8 cudaDev 3 nvmlDev 3 busId 5d000 parent 0x5618d2c4e0a0 color 1 key 3 commId 0x1234 - Init START",
			"kind=init host=node7 pid=41231 tid=41231 dev=3 api=ncclCommSplit jobrank=-1 comm=5618d3a11230 rank=1 nranks=8 cuda=3 nvml=3 bus=5d000 parent=5618d2c4e0a0 split=-1 color=1 key=3 commid=1234 phase=1"},
		{"split 2.23 START no space", p + "ncclCommSplit comm 0x5618d3a11230 rank 1 nranks 8 cudaDev 3 nvmlDev 3 busId 5d000 parent 0x5618d2c4e0a0 color 1 key 3- Init START",
			"kind=init host=node7 pid=41231 tid=41231 dev=3 api=ncclCommSplit jobrank=-1 comm=5618d3a11230 rank=1 nranks=8 cuda=3 nvml=3 bus=5d000 parent=5618d2c4e0a0 split=-1 color=1 key=3 phase=1"},
		{"split 2.28 (real)", "vm:883:883 [0] NCCL INFO ncclCommSplit comm 0x4d6deae0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 parent 0x45e01cb0 splitCount 1 color 2130503744 key 0- Init START",
			"kind=init host=vm pid=883 tid=883 dev=0 api=ncclCommSplit jobrank=-1 comm=4d6deae0 rank=0 nranks=2 cuda=0 nvml=0 bus=60 parent=45e01cb0 split=1 color=2130503744 key=0 phase=1"},
		{"split COMPLETE 2.28 (real)", "vm:883:883 [0] NCCL INFO ncclCommSplit comm 0x4d6deae0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 parent 0x45e01cb0 splitCount 1 color 2130503744 key 0 - Init COMPLETE",
			"kind=init host=vm pid=883 tid=883 dev=0 api=ncclCommSplit jobrank=-1 comm=4d6deae0 rank=0 nranks=2 cuda=0 nvml=0 bus=60 parent=45e01cb0 split=1 color=2130503744 key=0 phase=2"},
		{"init 2.29 with [Rank]", p + "[Rank 3] ncclCommInitRankConfig comm 0x5618d2c4e0a0 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 5d000 commId 0x3b0e9c1d77a2f415 - Init START",
			"kind=init host=node7 pid=41231 tid=41231 dev=3 api=ncclCommInitRankConfig jobrank=3 comm=5618d2c4e0a0 rank=3 nranks=16 cuda=3 nvml=3 bus=5d000 commid=3b0e9c1d77a2f415 phase=1"},
		{"split 2.29 childCount", p + "ncclCommShrink comm 0x5618d3a11230 rank 1 nranks 8 cudaDev 3 nvmlDev 3 busId 5d000 parent 0x5618d2c4e0a0 childCount 4 color -1 key 3- Init START",
			"kind=init host=node7 pid=41231 tid=41231 dev=3 api=ncclCommShrink jobrank=-1 comm=5618d3a11230 rank=1 nranks=8 cuda=3 nvml=3 bus=5d000 parent=5618d2c4e0a0 split=4 color=-1 key=3 phase=1"},
		{"comm info 2.20+", "vm:1210:1210 [0] NCCL INFO comm 0x35ad8de0 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
			"kind=comm_info host=vm pid=1210 tid=1210 dev=0 comm=35ad8de0 rank=0 nranks=2 nnodes=1 local=0"},

		// Per-op lines.
		{"allreduce (real)", "vm:635:635 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3e58c00000 recvbuff 0x7f3e58c00000 count 6000000 datatype 7 op 0 root 0 comm 0x1f026430 [nranks=2] stream (nil)",
			"kind=coll host=vm pid=635 tid=635 dev=0 op=AllReduce opcount=0 count=6000000 dt=float32 red=0 root=0 comm=1f026430 nranks=2"},
		{"bf16 hex opCount", p + "AllReduce: opCount 1a sendbuff 0x7f3a5c000000 recvbuff 0x7f3a5c000000 count 25690112 datatype 9 op 0 root 0 comm 0x5618d2c4e0a0 [nranks=16] stream 0x5618d2b1c8f0",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=AllReduce opcount=1a count=25690112 dt=bfloat16 red=0 root=0 comm=5618d2c4e0a0 nranks=16"},
		{"send root is peer", p + "Send: opCount 1b sendbuff (nil) recvbuff 0x7f3a60000000 count 4194304 datatype 7 op 0 root 11 comm 0x5618d2c4e0a0 [nranks=16] stream 0x5618d2b1c8f0",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=Send opcount=1b count=4194304 dt=float32 red=0 root=11 comm=5618d2c4e0a0 nranks=16"},
		{"recv", p + "Recv: opCount 1b sendbuff (nil) recvbuff 0x7f3a60000000 count 4 datatype 0 op 0 root 2 comm 0x5618d2c4e0a0 [nranks=16] stream 0x5618d2b1c8f0",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=Recv opcount=1b count=4 dt=int8 red=0 root=2 comm=5618d2c4e0a0 nranks=16"},
		{"fp8 e4m3 2.24", p + "AllGather: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 10 op 0 root 0 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=AllGather opcount=0 count=8 dt=float8e4m3 red=0 root=0 comm=abc nranks=8"},
		{"fp8 e5m2", p + "ReduceScatter: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 11 op 2 root 0 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=ReduceScatter opcount=0 count=8 dt=float8e5m2 red=2 root=0 comm=abc nranks=8"},
		{"uint64 max avg", p + "Reduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 5 op 4 root 3 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=Reduce opcount=0 count=8 dt=uint64 red=4 root=3 comm=abc nranks=8"},
		{"user redop (PreMulSum)", p + "AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 6 op 123456789 root 0 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=AllReduce opcount=0 count=8 dt=float16 red=123456789 root=0 comm=abc nranks=8"},
		{"alltoall 2.28", p + "AlltoAll: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 2 op 0 root 0 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=AlltoAll opcount=0 count=8 dt=int32 red=0 root=0 comm=abc nranks=8"},
		{"gather", p + "Gather: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 3 op 0 root 1 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=Gather opcount=0 count=8 dt=uint32 red=0 root=1 comm=abc nranks=8"},
		{"scatter", p + "Scatter: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 4 op 0 root 1 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=Scatter opcount=0 count=8 dt=int64 red=0 root=1 comm=abc nranks=8"},
		{"broadcast f64", p + "Broadcast: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 8 op 0 root 1 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=Broadcast opcount=0 count=8 dt=float64 red=0 root=1 comm=abc nranks=8"},
		{"uint8 prod", p + "AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 1 op 1 root 0 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=AllReduce opcount=0 count=8 dt=uint8 red=1 root=0 comm=abc nranks=8"},
		{"min", p + "AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 3 root 0 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=AllReduce opcount=0 count=8 dt=float32 red=3 root=0 comm=abc nranks=8"},
		{"one-sided 2.29", p + "PutSignal: opCount 0 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 5 comm 0xabc [nranks=8] stream (nil)",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=PutSignal opcount=0 count=8 dt=float32 red=0 root=5 comm=abc nranks=8"},
		{"RCCL trailing fields", p + "AllReduce: opCount 3 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0xabc [nranks=8] stream 0x9 task 3 globalrank 5",
			"kind=coll host=node7 pid=41231 tid=41231 dev=3 op=AllReduce opcount=3 count=8 dt=float32 red=0 root=0 comm=abc nranks=8"},
		{"truncated coll line", p + "AllReduce: opCount 3 sendbuff 0x1 recvbuff 0x2 count 8 datat", "kind=info host=node7 pid=41231 tid=41231 dev=3"},

		// Tuning.
		{"tuning 2.24+ (real)", "vm:1210:1210 [0] NCCL INFO AllReduce: 24000000 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..23}", "kind=tuning host=vm pid=1210 tid=1210 dev=0"},
		{"tuning 2.20", p + "102760448 Bytes -> Algo 1 proto 2 time 1234.500000", "kind=tuning host=node7 pid=41231 tid=41231 dev=3"},
		{"tuning 2.23", p + "AllReduce: 102760448 Bytes -> Algo 1 proto 2 time 1234.500000", "kind=tuning host=node7 pid=41231 tid=41231 dev=3"},
		{"tuning symmetric 2.27", p + "AllReduce [Symmetric]: 1048576 Bytes -> Kernel AllReduce_AGxLL_R nchannels 4 nthreads 512", "kind=tuning host=node7 pid=41231 tid=41231 dev=3"},
		{"tuning copy engine 2.30.7", p + "AllGather [Copy Engine]: 1048576 Bytes -> cudaMemcpyBatch", "kind=tuning host=node7 pid=41231 tid=41231 dev=3"},

		// Channels and transports.
		{"p2p cumem read", p + "Channel 02/0 : 3[3] -> 4[4] via P2P/CUMEM/read", `kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=2 3->4 via="P2P/CUMEM/read"`},
		{"p2p direct pointer", p + "Channel 02/1 : 3[3] -> 4[4] via P2P/direct pointer/read", `kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=2 3->4 via="P2P/direct pointer/read"`},
		{"p2p ipc", p + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", `kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=0 0->1 via="P2P/IPC"`},
		{"p2p indirect", p + "Channel 00/0 : 0[0] -> 5[5] via P2P/indirect/2[2]", `kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=0 0->5 via="P2P/indirect/2[2]"`},
		{"shm ≤2.30.4", p + "Channel 00 : 3[3] -> 4[4] via SHM/direct/direct", `kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=0 3->4 via="SHM/direct/direct"`},
		{"shm 2.30.7", p + "Channel 00 : 3[3] -> 4[4] via SHM/direct", `kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=0 3->4 via="SHM/direct"`},
		{"net receive gdr", "node7:41231:41350 [3] NCCL INFO Channel 01/0 : 11[3] -> 3[3] [receive] via NET/IB/3/GDRDMA",
			`kind=channel host=node7 pid=41231 tid=41350 dev=3 ch=1 11->3 via="NET/IB/3/GDRDMA" net="IB" netdev=3 proxy=-1 gdr=true send=false recv=true`},
		{"net send pxn shared", "node7:41231:41350 [3] NCCL INFO Channel 01/0 : 3[3] -> 11[3] [send] via NET/IB/3(5)/GDRDMA/Shared",
			`kind=channel host=node7 pid=41231 tid=41350 dev=3 ch=1 3->11 via="NET/IB/3(5)/GDRDMA/Shared" net="IB" netdev=3 proxy=5 gdr=true send=true recv=false`},
		{"net 2.26 (PCI)", p + "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0(PCI)",
			`kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=0 0->8 via="NET/IB/0(PCI)" net="IB" netdev=0 proxy=-1 gdr=false send=true recv=false`},
		{"net plugin with spaces", p + "Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/2/GDRDMA",
			`kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=0 0->8 via="NET/AWS Libfabric/2/GDRDMA" net="AWS Libfabric" netdev=2 proxy=-1 gdr=true send=true recv=false`},
		{"net socket", p + "Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
			`kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=0 0->1 via="NET/Socket/0" net="Socket" netdev=0 proxy=-1 gdr=false send=true recv=false`},
		{"rccl busId brackets", p + "Channel 00/0 : 0[d6000] -> 1[d7000] via P2P/IPC comm 0x1 nRanks 02", `kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=0 0->1 via="P2P/IPC comm 0x1 nRanks 02"`},
		{"collnet", p + "CollNet 00/0 : 3 [send] via COLLNET/SHARP/0/GDRDMA", `kind=channel host=node7 pid=41231 tid=41231 dev=3 ch=0 0->0 via="COLLNET/SHARP/0/GDRDMA"`},
		{"ring dump", "vm:1210:1210 [0] NCCL INFO Channel 00/24 : 0 1", "kind=ring host=vm pid=1210 tid=1210 dev=0"},

		// Network devices.
		{"ib devices", p + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB ib0:10.0.12.7<0>",
			`kind=net_ib_devices host=node7 pid=41231 tid=41231 dev=3 text="[0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]"`},
		{"ib merged 2.20-2.23", p + "NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} ; OOB eth0:10.1.0.7<0>",
			`kind=net_ib_devices host=node7 pid=41231 tid=41231 dev=3 text="[0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE}"`},
		{"ib 2.30.7 rail", p + "NET/IB : Using [0]mlx5_0:1:0:/IB [1]mlx5_1:1:1:/IB; OOB ib0:10.0.12.7<0>",
			`kind=net_ib_devices host=node7 pid=41231 tid=41231 dev=3 text="[0]mlx5_0:1:0:/IB [1]mlx5_1:1:1:/IB"`},
		{"ib none", "vm:1210:1210 [0] NCCL INFO NET/IB : No device found.", "kind=net_ib_none host=vm pid=1210 tid=1210 dev=0"},
		{"socket devices", p + "NET/Socket : Using [0]eth0:10.1.0.7<0> [1]eth1:10.2.0.7<0>", `kind=net_socket_devices host=node7 pid=41231 tid=41231 dev=3 text="[0]eth0:10.1.0.7<0> [1]eth1:10.2.0.7<0>"`},
		{"bootstrap 2.24+", "vm:635:635 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>", `kind=bootstrap host=vm pid=635 tid=635 dev=0 text="eth0:192.0.2.2<0>"`},
		{"bootstrap ≤2.23", p + "Bootstrap : Using eth0:10.1.0.7<0>", `kind=bootstrap host=node7 pid=41231 tid=41231 dev=3 text="eth0:10.1.0.7<0>"`},

		// Destroy, abort, revoke.
		{"destroy (real)", "vm:883:883 [0] NCCL INFO comm 0x4db0dcf0 rank 0 nranks 2 cudaDev 0 busId 60 - Destroy COMPLETE", "kind=destroy host=vm pid=883 tid=883 dev=0 comm=4db0dcf0 rank=0 nranks=2 phase=3"},
		{"abort complete", p + "comm 0x5618d2c4e0a0 rank 3 nranks 16 cudaDev 3 busId 5d000 - Abort COMPLETE", "kind=destroy host=node7 pid=41231 tid=41231 dev=3 comm=5618d2c4e0a0 rank=3 nranks=16 phase=5"},
		{"abort start 2.28", p + "comm 0x5618d2c4e0a0 rank 3 nRanks 16 cudaDev 3 busId 5d000 - Abort START", "kind=destroy host=node7 pid=41231 tid=41231 dev=3 comm=5618d2c4e0a0 rank=3 nranks=16 phase=4"},
		{"revoke start", p + "comm 0x5618d2c4e0a0 rank 3 nRanks 16 cudaDev 3 busId 5d000 - Revoke START", "kind=destroy host=node7 pid=41231 tid=41231 dev=3 comm=5618d2c4e0a0 rank=3 nranks=16 phase=6"},
		{"revoke complete", p + "comm 0x5618d2c4e0a0 rank 3 nRanks 16 cudaDev 3 busId 5d000 - Revoke COMPLETE, result 0", "kind=destroy host=node7 pid=41231 tid=41231 dev=3 comm=5618d2c4e0a0 rank=3 nranks=16 phase=7"},

		// IB completion errors, every version.
		{"ibcqe 2.18", w + "NET/IB : Got completion from peer 10.0.12.8<50123> with error 12, opcode 0, len 0, vendor err 129 (Send)",
			`kind=ib_completion host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 peer=10.0.12.8<50123> status=12 hca= req=Send`},
		{"ibcqe 2.20", w + "NET/IB : Got completion from peer 10.0.12.8<50123> with status=5 opcode=128 len=0 vendor err 244 (Recv)",
			`kind=ib_completion host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 peer=10.0.12.8<50123> status=5 hca= req=Recv`},
		{"ibcqe 2.28.7", w + "NET/IB: Got completion from peer 10.0.12.8<50123> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) reqSize=0 vendor_err=129 req_type=Send hca mlx5_3",
			`kind=ib_completion host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 peer=10.0.12.8<50123> status=12 hca=mlx5_3 req=Send`},
		{"ibcqe GIN 2.29", w + "NET/IB/GIN: Got completion from peer 10.0.12.8<50123> with status=12 opcode=0 len=0 vendor err 129 (IPut) hca mlx5_1",
			`kind=ib_completion host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 peer=10.0.12.8<50123> status=12 hca=mlx5_1 req=IPut`},
		{"ibcqe RoCE gids", w + "NET/IB: Got completion from peer 10.0.12.8<50123> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.12.7 remoteGids::ffff:10.0.12.8 hca mlx5_2",
			`kind=ib_completion host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 peer=10.0.12.8<50123> status=12 hca=mlx5_2 req=Send`},

		// IB async events.
		{"async 2.18", w + "NET/IB : Got async event : port error", `kind=ib_async host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 dev= port=0 event="port error" code=0 fatal=false`},
		{"async 2.20", w + "NET/IB : mlx5_1:1 Got async event : port error", `kind=ib_async host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 dev=mlx5_1 port=1 event="port error" code=0 fatal=false`},
		{"async 2.23 error", w + "NET/IB : mlx5_1:1 Got async error event: port error", `kind=ib_async host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 dev=mlx5_1 port=1 event="port error" code=0 fatal=false`},
		{"async 2.23 fatal", w + "NET/IB : mlx5_1:1 async fatal event: local catastrophic error", `kind=ib_async host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 dev=mlx5_1 port=1 event="local catastrophic error" code=0 fatal=true`},
		{"async fatal QP", w + "NET/IB : mlx5_1:1 async fatal event on QP (0x5618): QP fatal error", `kind=ib_async host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 dev=mlx5_1 port=1 event="QP fatal error" code=0 fatal=true`},
		{"async 2.29 non-fatal", w + "NET/IB : mlx5_1:1 Got non-fatal async event: port error(10)", `kind=ib_async host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 dev=mlx5_1 port=1 event="port error" code=10 fatal=false`},
		{"async unknown", w + "NET/IB : mlx5_1:1 unknown event type (42)", `kind=ib_async host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 dev=mlx5_1 port=1 event="unknown event type" code=42 fatal=false`},

		// Socket, proxy, CUDA, system.
		{"remote peer closed", w + "socketProgress: Connection closed by remote peer node8<39012>", `kind=conn_closed_remote host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 text="node8<39012>"`},
		{"socket recv failed 2.24", w + "socketProgressOpt: Call to recv from 10.0.0.8<39012> failed : Connection reset by peer", `kind=socket_error host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 peer="10.0.0.8<39012>" reason="Connection reset by peer" fatal=true`},
		{"socket 2.29", w + "ncclOsSocketProgressOpt: Call to send to 10.0.0.8<39012> failed : Broken pipe", `kind=socket_error host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 peer="10.0.0.8<39012>" reason="Broken pipe" fatal=true`},
		{"connect retries", w + "socketStartConnect: exceeded retries (20)", `kind=socket_connect host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 peer="" reason="exceeded retries (20)" fatal=true`},
		{"local rank closed (real)", "vm:1210:1225 [0] NCCL INFO [Service thread] Connection closed by localRank 1", "kind=conn_closed_local host=vm pid=1210 tid=1225 dev=0 local=1"},
		{"proxy error", w + "[Service thread] Error encountered progressing operation=Connect, res=3, closing connection", `kind=proxy_error host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 rank=-1 op="Connect" code=3`},
		{"proxy service", w + "[Proxy Service 3] Failed to execute operation Connect from rank 3, retcode 3", `kind=proxy_error host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 rank=3 op="Connect" code=3`},
		{"cuda failure", w + "Cuda failure 'an illegal memory access was encountered'", `kind=cuda_error host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 code=0 error="an illegal memory access was encountered"`},
		{"syscheck", w + "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_1:1", `kind=ib_setup host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 verb="ibv_modify_qp" dev=mlx5_1 port=1 reason="110 Connection timed out, on dev mlx5_1:1" fatal=true`},
		{"dup gpu", w + "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000", `kind=duplicate_gpu host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295 ranks=1,0 detail="1b000"`},
		{"other warn", w + "something new in 2.31", "kind=warn host=node7 pid=41231 tid=41873 dev=3 file=transport/net_ib.cc:1295"},
		{"breadcrumb", "node7:41231:41350 [3] NCCL INFO transport/net.cc:1346 -> 6", "kind=breadcrumb host=node7 pid=41231 tid=41350 dev=3 file=transport/net.cc:1346 code=6"},
		{"breadcrumb progress thread", "node7:41231:41350 [3] NCCL INFO transport/net.cc:1346 -> 6 [Progress Thread]", "kind=breadcrumb host=node7 pid=41231 tid=41350 dev=3 file=transport/net.cc:1346 code=6"},
		{"breadcrumb 2.30.7", "node7:41231:41350 [3] NCCL INFO transport/net.cc:1346 (sendProxyProgress) -> 6", "kind=breadcrumb host=node7 pid=41231 tid=41350 dev=3 file=transport/net.cc:1346 code=6"},
		{"ras dead", p + "RAS declaring peer 10.0.0.8<46585> as DEAD; rasDeadPeersHash 0xabc", `kind=ras_peer_dead host=node7 pid=41231 tid=41231 dev=3 text="10.0.0.8<46585>"`},

		// PyTorch and launcher lines.
		{"torch timeout (real)", "[rank0]:[E1121 22:51:18.197257951 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=92, OpType=ALLREDUCE, NumelIn=6000000, NumelOut=6000000, Timeout(ms)=25000) ran for 25053 milliseconds before timing out.",
			"kind=torch_timeout lrank=0 time=0000-11-21T22:51:18.197257951/9 rank=0 seq=92 optype=ALLREDUCE numel=6000000/6000000 timeout=25000 ran=25053"},
		{"torch timeout old form", "[rank25]:[E ProcessGroupNCCL.cpp:1316] [Rank 25] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=BROADCAST, TensorShape=[1024], Timeout(ms)=1800000) ran for 1800123 milliseconds before timing out.",
			"kind=torch_timeout lrank=25 rank=25 seq=7 optype=BROADCAST numel=-1/-1 timeout=1800000 ran=1800123"},
		{"torch work status (real)", "[rank0]:[E1121 22:51:18.197461605 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 92 PG status: last enqueued work: 97, last completed work: 91",
			"kind=torch_work_status lrank=0 time=0000-11-21T22:51:18.197461605/9 rank=0 pg=0/default_pg seq=92 enq=97 done=91 fatal=true"},
		{"torch dump signal", "[rank1]:[E1121 22:51:23.697341150 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a collective timeout from  rank 0 and we will try our best to dump the debug info. Last enqueued NCCL work: 91, last completed NCCL work: 91.This is most likely caused by",
			"kind=torch_work_status lrank=1 time=0000-11-21T22:51:23.697341150/9 rank=1 pg=0/default_pg seq=-1 enq=91 done=91 fatal=false from=0"},
		{"torch terminate", "[rank3]:[E0601 10:52:17.123 ProcessGroupNCCL.cpp:630] [Rank 3] To avoid data inconsistency, we are taking the entire process down.", "kind=torch_terminate lrank=3 time=0000-06-01T10:52:17.123000000/3 rank=3"},
		{"torch terminate pg", "[rank3]:[E0601 10:52:17.123 ProcessGroupNCCL.cpp:1600] [PG ID 0 PG GUID 0 Rank 3] Process group watchdog thread terminated with exception: [Rank 3] NCCL communicator was aborted on rank 3.", "kind=torch_terminate lrank=3 time=0000-06-01T10:52:17.123000000/3 rank=3"},
		{"torch comm created", "[rank3]:[I0601 10:52:17.123 ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) Rank 3] ProcessGroupNCCL created ncclComm_ 0x55cec3d7ed80 on CUDA device: 3", "kind=torch_comm_created lrank=3 time=0000-06-01T10:52:17.123000000/3 comm=55cec3d7ed80 rank=3"},
		{"torch nccl error", "[rank3]: torch.distributed.DistBackendError: NCCL error in: /pytorch/ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version 2.21.5", `kind=torch_nccl_error lrank=3 result=6 version="2.21.5"`},
		{"torchrun failure (real)", "E1121 22:52:05.021000 1170 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 3) local_rank: 1 (pid: 1211) of binary: /opt/torch/.venv/bin/python",
			"kind=launcher_exit time=0000-11-21T22:52:05.021000000/6 code=3 local=1 pid=1211"},
	}
	var l Line
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parseLike(t, &l, c.line, c.want)
		})
	}
}
