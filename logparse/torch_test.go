package logparse

import "testing"

// TestTorchWatchdogWordings: PyTorch's watchdog lines as 1.13 to 2.9 print them, with the
// c10 prefix of both glog layouts ("[E ProcessGroupNCCL.cpp:NNN]", "[E1120 10:00:00.123456789
// ProcessGroupNCCL.cpp:NNN]"), with and without the "[rankN]:" tag, and the rank PyTorch's
// own prefix names.
func TestTorchWatchdogWordings(t *testing.T) {
	const ns = "[E1120 10:00:00.123456789 ProcessGroupNCCL.cpp:1423] "
	cases := []struct {
		name, line, want string
		rank             int
	}{
		// The heartbeat monitor (2.2+).
		{"heartbeat 2.3", "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=103",
			"kind=torch_stuck lrank=1 rank=1 pg=0 queued=103 stuck=0ms", 1},
		{"heartbeat 2.2 untagged", "[E ProcessGroupNCCL.cpp:1224] [Rank 6] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=7",
			"kind=torch_stuck rank=6 pg= queued=7 stuck=0ms", 6},
		{"heartbeat 2.6", "[rank3]:" + ns + "[PG ID 0 PG GUID 0(default_pg) Rank 3] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=12",
			"kind=torch_stuck lrank=3 time=0000-11-20T10:00:00.123456789/9 rank=3 pg=0 queued=12 stuck=0ms", 3},
		{"stuck fatal 2.3", "[rank1]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 1] [PG 0 Rank 1] ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API hang blocking the watchdog.",
			"kind=torch_stuck lrank=1 rank=1 pg=0 queued=-1 stuck=600000ms", 1},
		{"stuck fatal 2.7 untagged", "[F1120 10:00:00.123456789 ProcessGroupNCCL.cpp:1557] [PG ID 0 PG GUID 0(default_pg) Rank 5] [PG ID 0 PG GUID 0(default_pg) Rank 5] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog.",
			"kind=torch_stuck time=0000-11-20T10:00:00.123456789/9 rank=5 pg=0 queued=-1 stuck=480000ms", 5},

		// Where the watchdog caught a failed work.
		{"failure detected 2.6 untagged", ns + "[PG ID 1 PG GUID 3(tp) Rank 2]  failure detected by watchdog at work sequence id: 120049 PG status: last enqueued work: 120051, last completed work: 120048",
			"kind=torch_work_status time=0000-11-20T10:00:00.123456789/9 rank=2 pg=1/tp seq=120049 enq=120051 done=120048 fatal=true", 2},
		{"failure detected 2.7", "[rank5]:" + ns + "[PG ID 0 PG GUID 0(default_pg) Rank 5]  failure detected by watchdog at work sequence id: 44 PG status: last enqueued work: 46, last completed work: 43",
			"kind=torch_work_status lrank=5 time=0000-11-20T10:00:00.123456789/9 rank=5 pg=0/default_pg seq=44 enq=46 done=43 fatal=true", 5},
		{"exception detected 2.4 untagged", "[E1206 18:44:12.715588844 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 12, last enqueued NCCL work: 14, last completed NCCL work: 11.",
			"kind=torch_work_status time=0000-12-06T18:44:12.715588844/9 rank=0 pg=1/ seq=12 enq=14 done=11 fatal=true", 0},
		// The dump signal (2.6+): this rank's counters, another rank's timeout.
		{"dump signal 2.6", "[rank0]:" + ns + "[PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from  rank 21 and we will try our best to dump the debug info. Last enqueued NCCL work: 905, last completed NCCL work: 903.This is most likely caused by incorrect usages of collectives",
			"kind=torch_work_status lrank=0 time=0000-11-20T10:00:00.123456789/9 rank=0 pg=0/default_pg seq=-1 enq=905 done=903 fatal=false from=21", 0},
		{"dump signal no rank", ns + "[PG ID 0 PG GUID 0(default_pg) Rank 2] Received a dump signal due to a collective timeout from rank x. Last enqueued NCCL work: 9, last completed NCCL work: 8.",
			"kind=torch_work_status time=0000-11-20T10:00:00.123456789/9 rank=2 pg=0/default_pg seq=-1 enq=9 done=8 fatal=false", 2},
		// Counters no rank can have are dropped, not reported.
		{"completed beyond enqueued", "(RayWorkerWrapper pid=3101) [rank1]:[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank 1] Timeout at NCCL work: 4, last enqueued NCCL work: 4, last completed NCCL work: 81723649120037.",
			"kind=torch_work_status rank=1 pg=1/ seq=4 enq=4 done=-1 fatal=true", 1},
		{"absurd sequence", ns + "[PG ID 0 PG GUID 0(default_pg) Rank 3]  failure detected by watchdog at work sequence id: 7 PG status: last enqueued work: 99999999999999999, last completed work: 6",
			"kind=torch_work_status time=0000-11-20T10:00:00.123456789/9 rank=3 pg=0/default_pg seq=7 enq=-1 done=6 fatal=true", 3},
		{"timeout 1.13", "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=207, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800412 milliseconds before timing out.",
			"kind=torch_timeout rank=3 seq=207 optype=ALLREDUCE numel=-1/-1 timeout=1800000 ran=1800412", 3},

		// A CUDA error in the watchdog thread.
		{"watchdog CUDA 2.0", "[E ProcessGroupNCCL.cpp:915] [Rank 1] NCCL watchdog thread terminated with exception: CUDA error: unspecified launch failure",
			`kind=cuda_error quoted code=0 error="unspecified launch failure" watchdog rank=1`, 1},
		{"watchdog CUDA 2.4", "[rank0]:[E907 22:34:22.823452114 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) Rank 0] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
			`kind=cuda_error lrank=0 quoted code=0 error="an illegal memory access was encountered" watchdog rank=0`, 0},
		{"watchdog CUDA what()", "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: CUDA error: device-side assert triggered",
			`kind=cuda_error quoted code=0 error="device-side assert triggered" watchdog rank=2`, 2},
		{"watchdog CUDA flattened", "[rank4]:" + ns + "[PG ID 0 PG GUID 0(default_pg) Rank 4] Process group watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
			`kind=cuda_error lrank=4 time=0000-11-20T10:00:00.123456789/9 quoted code=0 error="uncorrectable ECC error encountered" watchdog rank=4`, 4},
		{"watchdog other exception", "[rank4]:" + ns + "[PG ID 0 PG GUID 0(default_pg) Rank 4] Process group watchdog thread terminated with exception: NCCL communicator was aborted on rank 4.",
			"kind=torch_terminate lrank=4 time=0000-11-20T10:00:00.123456789/9 rank=4", 4},

		// A whole error pasted on one line, NCCL's last WARN quoted inside it.
		{"one line 1.13", "[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. [E ProcessGroupNCCL.cpp:460] To avoid data inconsistency, we are taking the entire process down. terminate called after throwing an instance of 'std::runtime_error' what(): NCCL error: remote process exited or there was a network error, NCCL version 2.14.3 ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely. Last error: NET/IB : Got completion from peer 10.9.8.7<40112> with error 12, opcode 0, len 0, vendor err 129",
			`kind=ib_completion quoted peer=10.9.8.7<40112> status=12 hca=`, -1},
		{"one line tagged", "[rank3]:[E ProcessGroupNCCL.cpp:455] [Rank 3] NCCL error: remote process exited or there was a network error, NCCL version 2.18.1 ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely. Last error: socketProgress: Connection closed by remote peer gpu-b<50122>",
			`kind=conn_closed_remote lrank=3 quoted text="gpu-b<50122>"`, 3},
		{"one line 2.6 rank from PG", ns + "[PG ID 0 PG GUID 0(default_pg) Rank 7] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5 ncclRemoteError: ... Last error: NET/IB: Got completion from peer 10.9.8.7<40112> with status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_2",
			`kind=ib_completion quoted peer=10.9.8.7<40112> status=12 hca=mlx5_2 req=Send`, 7},
		{"one line unknown quote", "[rank3]:[E ProcessGroupNCCL.cpp:455] [Rank 3] NCCL error: unhandled system error, NCCL version 2.18.1 ncclSystemError: ... Last error: something NCCL 2.31 says",
			`kind=torch_nccl_error lrank=3 result=2 version="2.18.1"`, -1},
		{"one line quote follows", "[rank3]:[E ProcessGroupNCCL.cpp:455] [Rank 3] we are taking the entire process down. Last error:",
			"kind=torch_terminate lrank=3 rank=3", 3},
	}
	var l Line
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parseLike(t, &l, c.line, c.want)
			if l.Torch.Rank != c.rank {
				t.Errorf("rank %d, want %d", l.Torch.Rank, c.rank)
			}
			if _, ok := EventOf(&l, 0); !ok {
				t.Errorf("no event")
			}
		})
	}
}
