package logparse

import (
	"testing"

	"github.com/ncclwatch/watchdog/snapshot"
)

func TestExceptionName(t *testing.T) {
	for _, tt := range []struct{ in, name, msg string }{
		{"ValueError: bad batch", "ValueError", "bad batch"},
		{"torch.OutOfMemoryError: CUDA out of memory.", "torch.OutOfMemoryError", "CUDA out of memory."},
		{"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError", ""},
		{"KeyboardInterrupt", "KeyboardInterrupt", ""},
		{"SystemExit: 3", "SystemExit", "3"},
		{"Error: not a class", "", ""},
		{"error: lower case", "", ""},
		{"myError: lower-case class", "", ""},
		{"Epoch 3 Error: loss", "", ""},
		{"ValueError:no space", "", ""},
		{".Error: dot", "", ""},
		{"3DError: digit first", "", ""},
		{"torch.: empty class", "", ""},
	} {
		name, msg, ok := exceptionName([]byte(tt.in))
		if string(name) != tt.name || string(msg) != tt.msg || ok != (tt.name != "") {
			t.Errorf("%q: got %q %q %v", tt.in, name, msg, ok)
		}
	}
}

func TestOOMBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has":      2 << 30,
		"CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15 GiB": 20 << 20,
		"Tried to allocate 512 bytes":                                    512,
		"Tried to allocate 1.50 KiB":                                     1536,
		"Tried to allocate 99999999999999999999 TiB":                     0,
		"Tried to allocate lots":                                         0,
		"no allocation here":                                             0,
	} {
		if got := oomBytes([]byte(in)); got != want {
			t.Errorf("%q: %d, want %d", in, got, want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	for in, want := range map[string]snapshot.TorchWork{
		"CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float))": {Seq: 5, Op: "ALLREDUCE", Shape: "20, 10", Dtypes: "Float"},
		"CollectiveFingerPrint(SequenceNumber=9OpType=BARRIER)":                                                          {Seq: 9, Op: "BARRIER"},
		"CollectiveFingerPrint(OpType=ALLGATHER, TensorShape=[4], TensorDtypes=[Float, Half], TensorDeviceTypes=[cuda])": {Seq: -1, Op: "ALLGATHER", Shape: "4", Dtypes: "Float, Half"},
		"CollectiveFingerPrint(OpType=ALLGATHER)":                                                                        {Seq: -1, Op: "ALLGATHER"},
		"garbage": {Seq: -1},
	} {
		if got := Fingerprint([]byte(in)); got != want {
			t.Errorf("%q: %+v, want %+v", in, got, want)
		}
	}
}

func TestConnectAttempts(t *testing.T) {
	for in, want := range map[string]int{
		"ncclSocketConnect: connect to 10.1.2.3<4> returned Connection refused, retrying (5/34) after sleep for 500 msec": 5,
		"socketStartConnect: exceeded retries (35)":                                                                          35,
		"socketPollConnect: exceeded timeouts (10)":                                                                          10,
		"socketStartConnect: connect returned Connection timed out, exceeded error retry count (35)":                         35,
		"ncclSocketConnect: connect to 1.2.3.4<5> returned Connection refused, exceeded error retry count after 20 attempts": 20,
		"Call to connect returned Connection refused, retrying":                                                              0,
		"Connect to 1.2.3.4<5> failed after 3 seconds":                                                                       0,
	} {
		if got := connectAttempts([]byte(in)); got != want {
			t.Errorf("%q: %d, want %d", in, got, want)
		}
	}
}

// TestNetPlugin: only a plugin that was asked for and failed, or a network that did not come
// up, is an event; the default plugin's absence is how most jobs start.
func TestNetPlugin(t *testing.T) {
	const i = "gpu-a:61:61 [0] NCCL INFO "
	for _, tt := range []struct {
		line         string
		code         int
		name, reason string
	}{
		{i + "NET/Plugin : Plugin load (libnccl-net-aws.so) returned 2 : libnccl-net-aws.so: cannot open shared object file: No such file or directory", snapshot.NetPluginLoad, "libnccl-net-aws.so", "cannot open shared object file: No such file or directory"},
		{i + "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory", 0, "", ""},
		{i + "NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory : when loading libnccl-net.so", 0, "", ""},
		{i + "NET/Plugin: Plugin load returned 2 : libnccl-net.so: undefined symbol: fi_getinfo : when loading libnccl-net.so", snapshot.NetPluginLoad, "libnccl-net.so", "undefined symbol: fi_getinfo"},
		{i + "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation", 0, "", ""},
		{i + "NET/Plugin: No plugin found (libnccl-net-gib.so)", snapshot.NetPluginLoad, "libnccl-net-gib.so", "not found"},
		{i + "NET/Plugin: Could not find: libnccl-net.so", 0, "", ""},
		{i + "NET/Plugin: Using internal network plugin.", 0, "", ""},
		{i + "NET/Plugin: Loaded net plugin SPCX (v12)", 0, "", ""},
		{i + "NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.", 0, "", ""},
		{i + "NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are not supported.", snapshot.NetPluginLoad, "ncclNetPlugin", "Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are not supported."},
		{i + "NET/Plugin: libnccl-net.so: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found", snapshot.NetPluginLoad, "libnccl-net.so", "/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found"},
		{i + "Failed to initialize NET plugin SPCX", snapshot.NetPluginInit, "SPCX", ""},
	} {
		var l Line
		Parse([]byte(tt.line), &l)
		if tt.code == 0 {
			if l.Kind == KindNetFallback {
				t.Errorf("%q: an event (%q)", tt.line, l.Detail)
			}
			continue
		}
		if l.Kind != KindNetFallback || l.Code != tt.code || string(l.Detail) != tt.name || string(l.Text) != tt.reason {
			t.Errorf("%q: kind %s code %d name %q reason %q", tt.line, l.Kind, l.Code, l.Detail, l.Text)
		}
	}
}

// TestExceptionClassIsNoHostLabel: "ValueError: x" reads like pdsh's "host: line"; the
// exception wins where nothing else claims the line, and lines other readers know keep
// their kind.
func TestExceptionClassIsNoHostLabel(t *testing.T) {
	for line, kind := range map[string]Kind{
		"ValueError: bad":             KindRankExit,
		"[rank3]: RuntimeError: boom": KindRankExit,
		"gpu-node7: ValueError: bad":  KindRankExit,
		"RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error, NCCL version 2.19.3":          KindTorchNCCLError,
		"torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited or there was a network error, NCCL version 2.21.5": KindTorchNCCLError,
		"gpu-node7: hello world": KindUnknown,
	} {
		var l Line
		Parse([]byte(line), &l)
		if l.Kind != kind {
			t.Errorf("%q: %s, want %s", line, l.Kind, kind)
		}
	}
}
