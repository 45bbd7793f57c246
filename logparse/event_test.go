package logparse

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/snapshot"
)

func TestEventOf(t *testing.T) {
	const w = "node7:41231:41873 [3] transport/net_ib.cc:1295 NCCL WARN "
	for _, tt := range []struct {
		name string
		line string
		ok   bool
		want snapshot.Event
	}{
		{"per-op line is no event", "vm:635:635 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3e58c00000 recvbuff 0x7f3e58c00000 count 6000000 datatype 7 op 0 root 0 comm 0x1f026430 [nranks=2] stream (nil)", false, snapshot.Event{}},
		{"destroy is no event", "node7:41231:41231 [3] NCCL INFO comm 0x5618d2c4e0a0 rank 3 nranks 16 cudaDev 3 busId 5d000 - Destroy COMPLETE", false, snapshot.Event{}},
		{"abort names its communicator", "node7:41231:41231 [3] NCCL INFO comm 0x5618d2c4e0a0 rank 3 nranks 16 cudaDev 3 busId 5d000 - Abort COMPLETE", true,
			snapshot.Event{Kind: snapshot.EventCommAbort, Comm: "0x5618d2c4e0a0"}},
		{"local rank closed", "vm:1210:1225 [0] NCCL INFO [Service thread] Connection closed by localRank 1", true,
			snapshot.Event{Kind: snapshot.EventConnClosedLocal, LocalRank: 1}},
		{"IB completion", w + "NET/IB: Got completion from peer 10.0.12.8<50123> with status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_3", true,
			snapshot.Event{Kind: snapshot.EventIBCompletion, Peer: "10.0.12.8<50123>", Dev: "mlx5_3", Detail: "Send", Code: 12, Fatal: true, Src: "transport/net_ib.cc"}},
		{"IB async", w + "NET/IB : mlx5_1:1 Got async event : port error", true,
			snapshot.Event{Kind: snapshot.EventIBAsync, Dev: "mlx5_1", Port: 1, Detail: "port error", Src: "transport/net_ib.cc"}},
		{"torch timeout", "[rank0]:[E1121 22:51:18.197257951 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=92, OpType=ALLREDUCE, NumelIn=6000000, NumelOut=6000000, Timeout(ms)=25000) ran for 25053 milliseconds before timing out.", true,
			snapshot.Event{Kind: snapshot.EventTorchTimeout, Code: 92, Work: []snapshot.TorchWork{
				{Seq: 92, Op: "ALLREDUCE", NumelIn: 6000000, NumelOut: 6000000, TimeoutMs: 25000}}}},
		{"torch timeout of a process group", "[rank3]:[E528 10:40:12.000000000 ProcessGroupNCCL.cpp:632] [PG ID 2 PG GUID 5(tp) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=_ALLGATHER_BASE, NumelIn=1024, NumelOut=4096, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.", true,
			snapshot.Event{Kind: snapshot.EventTorchTimeout, Code: 7, Comm: "2", Work: []snapshot.TorchWork{
				{Seq: 7, Op: "_ALLGATHER_BASE", NumelIn: 1024, NumelOut: 4096, TimeoutMs: 600000}}}},
		{"desync", "[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=5, OpType=BROADCAST, TensorShape=[4], TensorDtypes=BFloat16, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)).Collectives differ in the following aspects: \t  Op type: ALLREDUCEvs BROADCAST", true,
			snapshot.Event{Kind: snapshot.EventTorchDesync, Code: 5, Fatal: true, Ranks: []int{1, 0}, Work: []snapshot.TorchWork{
				{Seq: 5, Op: "ALLREDUCE", Shape: "20, 10", Dtypes: "Float"}, {Seq: 5, Op: "BROADCAST", Shape: "4", Dtypes: "BFloat16"}}}},
		{"desync without tensors or sequence numbers", "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(OpType=ALLGATHER, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)), but Rank 2 is running collective: CollectiveFingerPrint(SequenceNumber=9OpType=BARRIER).", true,
			snapshot.Event{Kind: snapshot.EventTorchDesync, Code: -1, Fatal: true, Ranks: []int{0, 2}, Work: []snapshot.TorchWork{
				{Seq: -1, Op: "ALLGATHER", Shape: "4", Dtypes: "Float"}, {Seq: 9, Op: "BARRIER"}}}},
		{"monitored barrier", "[rank0]: RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms", true,
			snapshot.Event{Kind: snapshot.EventTorchBarrier, Code: 2, Fatal: true, Ranks: []int{1, 3}}},
		{"monitored barrier of a collective", "RuntimeError: ProcessGroupWrapper: Monitored Barrier encountered error running collective: CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE, TensorShape=[8], TensorDtypes=Float, TensorDeviceTypes=TensorOptions()). Error: [Rank 0]: Rank 2 failed to pass monitoredBarrier in 1800000 ms", true,
			snapshot.Event{Kind: snapshot.EventTorchBarrier, Code: 1, Fatal: true, Ranks: []int{2}, Work: []snapshot.TorchWork{
				{Seq: 12, Op: "ALLREDUCE", Shape: "8", Dtypes: "Float"}}}},
		{"CUDA OOM", "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of 79.15 GiB of which 1.06 GiB is free.", true,
			snapshot.Event{Kind: snapshot.EventRankExit, Fatal: true, Detail: "torch.OutOfMemoryError", Bytes: 2 << 30, Src: snapshot.ExitTraceback}},
		{"CUDA OOM before 2.5", "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.50 GiB already allocated)", true,
			snapshot.Event{Kind: snapshot.EventRankExit, Fatal: true, Detail: "RuntimeError", Bytes: 20 << 20, Src: snapshot.ExitTraceback}},
		{"user exception", "[rank3]: ValueError: batch 17 has no labels", true,
			snapshot.Event{Kind: snapshot.EventRankExit, Fatal: true, Detail: "ValueError", Src: snapshot.ExitTraceback}},
		{"interrupt", "KeyboardInterrupt", true,
			snapshot.Event{Kind: snapshot.EventRankExit, Fatal: true, Detail: "KeyboardInterrupt", Src: snapshot.ExitTraceback}},
		{"torchrun exit code", "  exitcode  : -9 (pid: 1212)", true,
			snapshot.Event{Kind: snapshot.EventRankExit, Fatal: true, Code: -9, PID: 1212, Detail: "SIGKILL", Src: snapshot.ExitLauncher}},
		{"torchrun signal", "  traceback : Signal 9 (SIGKILL) received by PID 1212", true,
			snapshot.Event{Kind: snapshot.EventRankExit, Fatal: true, Code: -9, PID: 1212, Detail: "SIGKILL", Src: snapshot.ExitLauncher}},
		{"torchrun record rank is no event", "  rank      : 2 (local_rank: 2)", false, snapshot.Event{}},
		{"word Error is no exception", "Error: could not open checkpoint", false, snapshot.Event{}},
		{"log line is no exception", "INFO: ValueError count is 3", false, snapshot.Event{}},
		{"invalid rank", "node7:41231:41231 [3] init.cc:1702 NCCL WARN Invalid rank requested : 4/4", true,
			snapshot.Event{Kind: snapshot.EventInvalidRank, Code: 4, Detail: "4/4", Fatal: true, Src: "init.cc"}},
		{"net plugin failed to load", "gpu-a:61:61 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by libnccl-net.so) : when loading libnccl-net.so", true,
			snapshot.Event{Kind: snapshot.EventNetFallback, Code: snapshot.NetPluginLoad, Detail: "libnccl-net.so", Peer: "/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by libnccl-net.so)"}},
		{"net plugin named and not found", "gpu-a:61:61 [0] NCCL INFO NET/Plugin: Could not find: ofi libnccl-net-ofi.so. Using internal network plugin.", true,
			snapshot.Event{Kind: snapshot.EventNetFallback, Code: snapshot.NetPluginLoad, Detail: "ofi libnccl-net-ofi.so", Peer: "not found"}},
		{"default net plugin absent is no event", "gpu-a:61:61 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.", false, snapshot.Event{}},
		{"IB not initialized", "vm:607:607 [0] NCCL INFO Failed to initialize NET plugin IB", true,
			snapshot.Event{Kind: snapshot.EventNetFallback, Code: snapshot.NetPluginInit, Detail: "IB"}},
		{"network not found", "nid006365:179857:179897 [1] net.cc:626 NCCL WARN Error: network AWS Libfabric not found.", true,
			snapshot.Event{Kind: snapshot.EventNetFallback, Code: snapshot.NetNotFound, Detail: "AWS Libfabric", Fatal: true, Src: "net.cc"}},
		{"other WARN keeps its message", w + "Some future NCCL complaint we have no rule for", true,
			snapshot.Event{Kind: snapshot.EventWarn, Src: "transport/net_ib.cc"}},
		{"torch work status", "[rank0]:[E1121 22:51:18.197461605 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 92 PG status: last enqueued work: 97, last completed work: 91", true,
			snapshot.Event{Kind: snapshot.EventTorchWorkStatus, Code: 91, Enqueued: 97, Comm: "0", Fatal: true}},
		{"torch dump status", "[rank1]:[E1121 22:51:23.697341150 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a collective timeout from  rank 0 and we will try our best to dump the debug info. Last enqueued NCCL work: 91, last completed NCCL work: 91.", true,
			snapshot.Event{Kind: snapshot.EventTorchWorkStatus, Code: 91, Enqueued: 91, Comm: "0", Ranks: []int{0}}},
		{"torch heartbeat", "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=103", true,
			snapshot.Event{Kind: snapshot.EventTorchStuck, Code: 103, Comm: "0", Fatal: true}},
		{"torch watchdog stuck", "[rank1]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 1] [PG 0 Rank 1] ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring enqueued collectives.", true,
			snapshot.Event{Kind: snapshot.EventTorchStuck, Code: -1, Comm: "0", Fatal: true}},
		{"torch watchdog CUDA error", "[rank0]:[E907 22:34:22.823452114 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) Rank 0] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered", true,
			snapshot.Event{Kind: snapshot.EventCudaError, Detail: "an illegal memory access was encountered", Fatal: true, Src: snapshot.SrcTorchWatchdog}},
		{"launcher exit", "E1121 22:52:05.021000 1170 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 3) local_rank: 1 (pid: 1211) of binary: /opt/torch/.venv/bin/python", true,
			snapshot.Event{Kind: snapshot.EventLauncherExit, Code: 3, LocalRank: 1, PID: 1211}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var l Line
			Parse([]byte(tt.line), &l)
			got, ok := EventOf(&l, 42)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v (kind %s)", ok, tt.ok, l.Kind)
			}
			if !ok {
				return
			}
			if got.T != 42 || got.Msg == "" {
				t.Errorf("time %d, message %q: want 42 and the line's message", got.T, got.Msg)
			}
			got.T, got.Msg = 0, ""
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("EventOf =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestEventMessageIsCut(t *testing.T) {
	var l Line
	Parse([]byte("node7:41231:41873 [3] misc/socket.cc:50 NCCL WARN "+strings.Repeat("é", 400)), &l)
	e, ok := EventOf(&l, 0)
	if !ok || len(e.Msg) > snapshot.MaxMsg || !strings.HasPrefix(strings.Repeat("é", 400), e.Msg) {
		t.Fatalf("ok=%v, %d bytes: want a valid prefix of at most %d bytes", ok, len(e.Msg), snapshot.MaxMsg)
	}
}

func TestEveryKindIsNamedAndEventsShareTheirName(t *testing.T) {
	for k := Kind(0); k < NumKinds; k++ {
		if k.String() == "" {
			t.Errorf("kind %d has no name", k)
		}
		if ev := eventKinds[k]; ev != "" && k != KindDestroy && string(ev) != k.String() {
			t.Errorf("kind %s reports event %s: the metric label and the event should share one name", k, ev)
		}
	}
}
