package logparse

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/ncclwatch/watchdog/snapshot"
)

// TestFailureLines: NCCL's failure messages in the words of each release, as posted logs
// show them (written here from NCCL's format strings; hosts and addresses are made up).
// Each must say what failed, with the peer, the reason and the ranks a rule needs.
func TestFailureLines(t *testing.T) {
	const w = "gpu-a:5120:5190 [1] misc/socket.cc:480 NCCL WARN "
	const i = "gpu-a:5120:5190 [1] NCCL INFO "
	cases := []struct {
		name, line, want string
	}{
		// Sockets: connections that could not be opened, in every version's words.
		{"connect failed 2.18", w + "socketStartConnect: Connect to 10.1.2.3<41234> failed : Software caused connection abort",
			`kind=socket_connect host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer="10.1.2.3<41234>" reason="Software caused connection abort" fatal=true`},
		{"connect no route", w + "socketStartConnect: Connect to 192.168.7.4<52822> failed : No route to host",
			`kind=socket_connect host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer="192.168.7.4<52822>" reason="No route to host" fatal=true`},
		{"poll connect returned", w + "socketPollConnect: Connect to 10.1.2.3<41234> returned 111(Connection refused) errno 111(Connection refused)",
			`kind=socket_connect host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer="10.1.2.3<41234>" reason="Connection refused" fatal=true`},
		{"retry count 2.24", w + "socketStartConnect: connect returned Connection timed out, exceeded error retry count (35)",
			`kind=socket_connect host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer="" reason="Connection timed out" fatal=true`},
		{"retry count 2.27", w + "ncclSocketConnect: connect to 10.1.2.3<41234> returned Connection refused, exceeded error retry count after 20 attempts",
			`kind=socket_connect host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer="10.1.2.3<41234>" reason="Connection refused" fatal=true`},
		{"poll connect 2.29", w + "ncclOsSocketPollConnect to 10.1.2.3<41234> failed with error No route to host",
			`kind=socket_connect host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer="10.1.2.3<41234>" reason="No route to host" fatal=true`},
		{"connect 2.4", w + "Connect to 172.16.0.9<38000> failed : Connection timed out",
			`kind=socket_connect host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer="172.16.0.9<38000>" reason="Connection timed out" fatal=true`},
		{"connect retry INFO", i + "Call to connect returned Connection refused, retrying",
			`kind=socket_connect host=gpu-a pid=5120 tid=5190 dev=1 peer="" reason="Connection refused" fatal=false`},
		{"connect retry INFO 2.27", i + "ncclSocketConnect: connect to 10.1.2.3<41234> returned Connection refused, retrying (1/34) after sleep for 100 msec",
			`kind=socket_connect host=gpu-a pid=5120 tid=5190 dev=1 peer="10.1.2.3<41234>" reason="Connection refused" fatal=false`},
		{"recv failed old Net form", w + "Net : Call to recv from 10.1.2.3<58355> failed : Broken pipe",
			`kind=socket_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer="10.1.2.3<58355>" reason="Broken pipe" fatal=true`},
		{"closed by peer hostname", w + "socketProgress: Connection closed by remote peer gpu-b.cluster<42830>",
			`kind=conn_closed_remote host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 text="gpu-b.cluster<42830>"`},
		{"stranger on the port", w + "socketFinalizeAccept: wrong magic 74656d2f20544547 != 7970663b906d70b9",
			`kind=socket_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer="" reason="socketFinalizeAccept: wrong magic 74656d2f20544547 != 7970663b906d70b9" fatal=false`},
		{"bootstrap truncated", w + "Message truncated : received 4096 bytes instead of 256",
			`kind=net_size_mismatch host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480`},
		{"no socket interface", w + "Bootstrap : no socket interface found",
			`kind=no_interface host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 code=0`},
		{"neither family", w + "ncclSocketInit: connecting to address  with family 0 is neither AF_INET(2) nor AF_INET6(10)",
			`kind=no_interface host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 code=0`},

		// Shared memory.
		{"shm extend", w + "Error: failed to extend /dev/shm/nccl-AbC123 to 9637892 bytes, error: No space left on device (28)",
			`kind=shm_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 code=0`},
		{"shm create", w + "Error while creating shared memory segment /dev/shm/nccl-AbC123 (size 9637888)",
			`kind=shm_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 code=0`},
		{"shm attach", w + "Error while attaching to shared memory segment /dev/shm/nccl-AbC123 (size 14156128), error: No such file or directory (2)",
			`kind=shm_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 code=1`},
		{"shm fallocate 2.7", w + "Call to posix_fallocate failed : No space left on device",
			`kind=shm_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 code=0`},

		// GPU assignment and versions.
		{"duplicate gpu", w + "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device 4f000",
			`kind=duplicate_gpu host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 ranks=3,0 detail="4f000"`},
		{"version mismatch", w + "Mismatched NCCL version detected : rank 4 version 21903 rank 0 version 22105",
			`kind=version_mismatch host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 ranks=4,0 detail="21903 rank 0 version 22105"`},

		{"rank checked in twice", w + "Bootstrap Root : rank 1 of 8 ranks has already checked in",
			`kind=rank_conflict host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 rank=1 nranks=8 detail=""`},
		{"ranks disagree on the size", w + "Bootstrap Root : mismatch in rank count from procs 8 : 16",
			`kind=rank_conflict host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 rank=-1 nranks=16 detail="8 : 16"`},
		{"stray client on the proxy", w + "[Service thread] Unknown command 66326 from localRank -1", `kind=warn host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480`},

		// CUDA inside NCCL.
		{"cuda oom", w + "Cuda failure 'out of memory'",
			`kind=cuda_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 code=0 error="out of memory"`},
		{"cuda numbered 2.30", w + "Cuda failure 700 'an illegal memory access was encountered'",
			`kind=cuda_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 code=700 error="an illegal memory access was encountered"`},

		{"rccl hip failure", w + "HIP failure 'hipErrorNoBinaryForGpu: no kernel image is available'",
			`kind=cuda_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 code=0 error="hipErrorNoBinaryForGpu: no kernel image is available"`},

		// nccl-tests' own failure lines end many posted logs.
		{"nccl-tests failure quoting a WARN", "gpu-a: Test NCCL failure common.cu:958 'unhandled system error / socketStartConnect: Connect to 10.1.2.3<5> failed : Connection refused'",
			`kind=socket_connect quoted peer="10.1.2.3<5>" reason="Connection refused" fatal=true`},
		{"nccl-tests failure alone", " .. gpu-a pid 77: Test NCCL failure common.cu:1291 'internal error - please report this issue to the NCCL developers / '",
			`kind=torch_nccl_error result=3 version=""`},
		{"nccl-tests cuda failure", "gpu-a: Test CUDA failure common.cu:941 'system not yet initialized'",
			`kind=cuda_error quoted code=0 error="system not yet initialized"`},

		// InfiniBand.
		{"ib completion before 2.7", w + "NET/IB : Got completion with error 4, opcode 0, len 32694, vendor err 81",
			`kind=ib_completion host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer= status=4 hca=`},
		{"ib completion plugin", w + "NET/IB : Got completion from peer 10.3.0.7<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00::1 remoteGidsfd00::2",
			`kind=ib_completion host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer=10.3.0.7<54862> status=12 hca= req=Recv`},
		{"ib completion link-local peer", w + "NET/IB : Got completion from peer fe80::1e34:da03:77:aa10%ib0<33397> with error 4, opcode 32611, len 32611, vendor err 81 (Send)",
			`kind=ib_completion host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 peer=fe80::1e34:da03:77:aa10%ib0<33397> status=4 hca= req=Send`},
		{"ibv modify qp", w + "Call to ibv_modify_qp failed with error Network is unreachable",
			`kind=ib_setup host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 verb="ibv_modify_qp" dev= port=0 reason="Network is unreachable" fatal=true`},
		{"ib open device", w + "NET/IB : Unable to open device mlx5_bond_1",
			`kind=ib_setup host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 verb="open" dev=mlx5_bond_1 port=0 reason="" fatal=false`},

		{"proxy lost a local peer", w + "[Service thread] Could not receive type from localRank 3, res=3, closed=1",
			`kind=conn_closed_local host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 local=3`},

		// Proxy.
		{"proxy call", w + "Proxy Call to rank 9 failed (Connect)",
			`kind=proxy_error host=gpu-a pid=5120 tid=5190 dev=1 file=misc/socket.cc:480 rank=9 op="Connect" code=0`},

		// PyTorch's side.
		{"last error quoted", "Last error: socketStartConnect: Connect to 127.0.0.1<45069> failed : Software caused connection abort",
			`kind=socket_connect quoted peer="127.0.0.1<45069>" reason="Software caused connection abort" fatal=true`},
		{"last error under srun", "10: Last error: 10: Duplicate GPU detected : rank 10 and rank 8 both on CUDA device 1b000",
			`kind=duplicate_gpu lrank=10 quoted ranks=10,8 detail="1b000"`},
		{"last error alone", "[rank2]: Last error:", "kind=unknown lrank=2 quoted"},
		{"a worker's exception", "(VllmWorkerProcess pid=4321) ERROR 05-01 10:11:12 multiproc_worker_utils.py:120] Exception in worker VllmWorkerProcess while processing method init_device: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), Traceback (most recent call last):",
			`kind=torch_nccl_error result=2 version=""`},
		{"store get failed", "RuntimeError: [14] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer. This may indicate a possible application crash on rank 0 or a network set up issue.",
			`kind=torch_store lrank=14 rank=0 reason="Connection reset by peer"`},
		{"store get timed out", "[rank2]: RuntimeError: [2] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout",
			`kind=torch_store lrank=2 rank=0 reason="Socket Timeout"`},
		{"nccl result detail", "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
			`kind=torch_nccl_error result=2 version=""`},
		{"watchdog exception 2.4", "[rank0]:[E1206 18:44:12.715588844 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752.",
			"kind=torch_work_status lrank=0 time=0000-12-06T18:44:12.715588844/9 rank=0 pg=1/ seq=7753 enq=7755 done=7752 fatal=true"},
		{"timeout at nccl work", "[rank4]:[E1016 03:31:38.929234295 ProcessGroupNCCL.cpp:1709] [PG 3 Rank 4] Timeout at NCCL work: 9141, last enqueued NCCL work: 9141, last completed NCCL work: 9140.",
			"kind=torch_work_status lrank=4 time=0000-10-16T03:31:38.929234295/9 rank=4 pg=3/ seq=9141 enq=9141 done=9140 fatal=true"},
		{"collector tag", "[trainer3]:gpu-a:5120:5190 [3] NCCL INFO Using network IB", `kind=using_network host=gpu-a pid=5120 tid=5190 dev=3 text="IB"`},
	}
	var l Line
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parseLike(t, &l, c.line, c.want)
		})
	}
}

// TestFailureEvents: the events the failure lines become carry what the rules read.
func TestFailureEvents(t *testing.T) {
	const w = "gpu-a:5120:5190 [1] misc/socket.cc:480 NCCL WARN "
	for _, tt := range []struct {
		line string
		want snapshot.Event
	}{
		{w + "socketStartConnect: Connect to 10.1.2.3<41234> failed : Connection refused",
			snapshot.Event{Kind: snapshot.EventSocketConnect, Peer: "10.1.2.3<41234>", Detail: "Connection refused", Fatal: true}},
		{w + "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device 4f000",
			snapshot.Event{Kind: snapshot.EventDuplicateGPU, Ranks: []int{3, 0}, Detail: "4f000", Fatal: true}},
		{w + "Cuda failure 'out of memory'",
			snapshot.Event{Kind: snapshot.EventCudaError, Detail: "out of memory", Fatal: true}},
		{w + "Error while attaching to shared memory segment /dev/shm/nccl-x (size 1), error: No such file or directory (2)",
			snapshot.Event{Kind: snapshot.EventShmError, Code: snapshot.ShmAttach, Fatal: true}},
		{w + "[Proxy Service 9] Failed to execute operation Connect from rank 9, retcode 6",
			snapshot.Event{Kind: snapshot.EventProxyError, Ranks: []int{9}, Detail: "Connect", Code: 6}},
		// GPU peer-to-peer through CUDA/HIP IPC, NCCL 2.3-2.5 and RCCL.
		{w + "failed to open CUDA IPC handle : 64 peer access is not supported between these two devices",
			snapshot.Event{Kind: snapshot.EventP2PError, Code: 64, Detail: "peer access is not supported between these two devices", Fatal: true}},
		{w + "failed to open CUDA IPC handle : 11 invalid argument",
			snapshot.Event{Kind: snapshot.EventP2PError, Code: 11, Detail: "invalid argument", Fatal: true}},
		{w + "hipIpcGetMemHandle failed : invalid argument",
			snapshot.Event{Kind: snapshot.EventP2PError, Detail: "invalid argument", Fatal: true}},
		// A rank of this job on another transport; the proxy losing its client.
		{w + "socketFinalizeAccept: wrong type 4 != 3",
			snapshot.Event{Kind: snapshot.EventSocketError, Code: snapshot.SocketWrongType, Detail: "4 != 3", Fatal: true}},
		{w + "socketFinalizeAccept: wrong magic 1234 != 5678",
			snapshot.Event{Kind: snapshot.EventSocketError}},
		{w + "Socket recv failed while polling for opId=0x7f00aa001000",
			snapshot.Event{Kind: snapshot.EventSocketError, Code: snapshot.SocketProxyPoll, Fatal: true}},
		// AWS OFI NCCL, new and old wording; a provider probe is no failure of its own.
		{w + "NET/OFI Request 0x7f00aa002000 completed with error. RC: 113. Error: 2 (UNDELIVERABLE). Completed length: 0",
			snapshot.Event{Kind: snapshot.EventNetError, Code: 113, Detail: "UNDELIVERABLE", Fatal: true}},
		{w + "NET/OFI Request 0x7f00aa002000 seq 12 completed with error. RC: 5. Error: 4099 (Unresponsive remote). Completed length: 0, Request: {dev: 0}",
			snapshot.Event{Kind: snapshot.EventNetError, Code: 5, Detail: "Unresponsive remote", Fatal: true}},
		{w + "NET/OFI Request 0x7f00aa002000 completed with error. RC: 5. Error: Input/output error. Completed length: 0, Request: {}",
			snapshot.Event{Kind: snapshot.EventNetError, Code: 5, Detail: "Input/output error", Fatal: true}},
		{w + "NET/OFI Unable to read from fi_cq_readerr. RC: -5. Error: Input/output error",
			snapshot.Event{Kind: snapshot.EventNetError, Code: -5, Detail: "Input/output error", Fatal: true}},
		{w + "NET/OFI Couldn't find any optimal provider",
			snapshot.Event{Kind: snapshot.EventNetError}},
		{w + "[Rem Allocator] Allocation failed (segment 0, fd 41)",
			snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnRemAllocator}},
		// CollNet (SHARP) set-up and its fallback; NVML that does not see a GPU.
		{w + "NET/IB : SHARP coll init error: Cannot create SHARP job(-11)",
			snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnCollNet, Detail: "SHARP coll init error: Cannot create SHARP job(-11)"}},
		{w + "SHARP group create: Streaming Tree lock failed (-18)",
			snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnCollNet}},
		{w + "Cannot initialize CollNet, using point-to-point network instead",
			snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnCollNetFallback}},
		{w + "nvmlDeviceGetHandleByPciBusId() failed: Not Found",
			snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnNVMLMissing, Detail: "Not Found", Fatal: true}},
	} {
		e, _ := eventNoMsg(t, tt.line)
		tt.want.Src = "misc/socket.cc"
		if !reflect.DeepEqual(e, tt.want) {
			t.Errorf("%q:\n got  %+v\n want %+v", tt.line, e, tt.want)
		}
	}
}

// FuzzFailureMessage feeds arbitrary messages to the failure readers, behind a WARN prefix,
// an INFO prefix and as PyTorch's quote: every field they set is a piece of the line, and
// the event they make is within the contract's limits.
func FuzzFailureMessage(f *testing.F) {
	for _, m := range []string{"socketStartConnect: Connect to 10.1.2.3<41234> failed : Connection refused",
		"socketPollConnect: Connect to 10.1.2.3<41234> returned 111(Connection refused) errno 111(x)",
		"ncclSocketConnect: connect to 1.2.3.4<5> returned Connection refused, retrying (1/34)",
		"Call to recv from 1.2.3.4<5> failed : Broken pipe", "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device 4f000",
		"Mismatched NCCL version detected : rank 4 version 21903 rank 0 version 22105", "Cuda failure 700 'x'", "Cuda failure '",
		"Error while attaching to shared memory segment /dev/shm/x", "Call to ibv_modify_qp failed with 110 x, on dev mlx5_1:1",
		"NET/IB : Got completion with error 4, opcode 0", "NET/IB: Got completion from peer a<1> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=x",
		"Proxy Call to rank 9 failed (", "[Proxy Service 9] Failed to execute operation Connect from rank", "Message truncated : peer",
		"Bootstrap Root : rank 1 of 8 ranks has already checked in", "Bootstrap Root : mismatch in rank count from procs 8 : ",
		"[Service thread] Unknown command 7 from localRank -1", "failed to open CUDA IPC handle : 64 x", "hipIpcGetMemHandle failed : ",
		"socketFinalizeAccept: wrong type 4 != 3", "Socket recv failed while polling for opId=0x1",
		"NET/OFI Request 0x1 completed with error. RC: 113. Error: 2 (UNDELIVERABLE). Completed length: 0",
		"NET/OFI x RC: 1. Error: (", "[Rem Allocator] Allocation failed (segment 0, fd 1)"} {
		f.Add([]byte(m))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		for _, prefix := range []string{"h:1:2 [0] x.cc:1 NCCL WARN ", "h:1:2 [0] NCCL INFO ", "Last error: "} {
			line := append([]byte(prefix), msg...)
			var l Line
			Parse(line, &l)
			if l.Kind >= NumKinds {
				t.Fatalf("kind %d out of range", l.Kind)
			}
			for _, b := range [][]byte{l.Msg, l.Text, l.Detail, l.Dev2} {
				if len(b) > 0 && !bytes.Contains(line, b) {
					t.Fatalf("%q: field %q is not a piece of the line", line, b)
				}
			}
			if e, ok := EventOf(&l, 0); ok {
				if len(e.Msg) > snapshot.MaxMsg || len(e.Detail) > snapshot.MaxMsg || len(e.Ranks) > 2 {
					t.Fatalf("%q: event %+v exceeds the contract", line, e)
				}
			}
		}
	})
}

// TestSignal: UCX's report of a fatal signal names its host and pid; an NCCL frame of the
// backtrace after it is read, other frames are not.
func TestSignal(t *testing.T) {
	for _, tt := range []struct {
		line string
		want snapshot.Event
		host string
		pid  int
	}{
		{"[node-a7:4411 :0:4490] Caught signal 7 (Bus error: nonexistent physical address)",
			snapshot.Event{Kind: snapshot.EventSignal, Code: 7, Detail: "Bus error: nonexistent physical address", Fatal: true}, "node-a7", 4411},
		{"[node-a7:4411:1:4490] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)",
			snapshot.Event{Kind: snapshot.EventSignal, Code: 11, Detail: "Segmentation fault: address not mapped to object at address 0x8", Fatal: true}, "node-a7", 4411},
		{" 2 0x00000000000742f0 ncclGroupEnd()  ???:0",
			snapshot.Event{Kind: snapshot.EventSignal, Peer: "ncclGroupEnd()"}, "", 0},
	} {
		e, l := eventNoMsg(t, tt.line)
		if !reflect.DeepEqual(e, tt.want) || string(l.Torch.Host) != tt.host || l.Torch.PID != tt.pid || l.Torch.Rank != -1 {
			t.Errorf("%q:\n got  %+v %s:%d\n want %+v %s:%d", tt.line, e, l.Torch.Host, l.Torch.PID, tt.want, tt.host, tt.pid)
		}
	}
	for _, line := range []string{" 0 0x0000000000043090 killpg()  ???:0", "[E ProcessGroupNCCL.cpp:754] Caught signal", "12 0x"} {
		var l Line
		Parse([]byte(line), &l)
		if l.Kind == KindSignal {
			t.Errorf("%q read as a signal", line)
		}
	}
}

// eventNoMsg parses a line into its event, without the message text.
func eventNoMsg(t *testing.T, line string) (snapshot.Event, *Line) {
	t.Helper()
	var l Line
	Parse([]byte(line), &l)
	e, ok := EventOf(&l, 0)
	if !ok {
		t.Fatalf("%q: no event", line)
	}
	e.Msg = ""
	return e, &l
}
