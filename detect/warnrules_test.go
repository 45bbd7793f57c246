package detect

import (
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestWarnsThatNameTheirCause: WARNs whose cause NCCL's maintainers know become that
// cause, not the generic error or the consequence that follows them.
func TestWarnsThatNameTheirCause(t *testing.T) {
	ev := func(k snapshot.EventKind, code int, detail, msg string) snapshot.Event {
		return snapshot.Event{Kind: k, Code: code, Detail: detail, Msg: msg, Fatal: true, Stage: snapshot.StageInit}
	}
	for _, tt := range []struct {
		name  string
		ev    map[int][]snapshot.Event
		kind  incident.Kind
		say   []string
		avoid string
	}{
		{"CUDA IPC between the GPUs of a host", map[int][]snapshot.Event{
			0: {ev(snapshot.EventP2PError, 64, "peer access is not supported between these two devices", "failed to open CUDA IPC handle : 64 peer access ...")},
			1: {ev(snapshot.EventP2PError, 11, "invalid argument", "failed to open CUDA IPC handle : 11 invalid argument")}},
			incident.KindConfig, []string{"gpu-a", "NCCL_P2P_DISABLE=1"}, "out of memory"},
		{"nodes on different transports", map[int][]snapshot.Event{
			2: {ev(snapshot.EventSocketError, snapshot.SocketWrongType, "4 != 3", "socketFinalizeAccept: wrong type 4 != 3"),
				{Kind: snapshot.EventProxyError, Code: 3, Msg: "[Proxy Service 2] Failed to execute operation Connect from rank 2, retcode 3"}}},
			incident.KindConfig, []string{"NET/IB connection where it listens for NET/Socket", "NCCL_IB_DISABLE"}, "proxy_error"},
		{"a network plugin's failed delivery", map[int][]snapshot.Event{
			3: {ev(snapshot.EventNetError, 113, "UNDELIVERABLE", "NET/OFI Request 0x1 completed with error. RC: 113. Error: 2 (UNDELIVERABLE).")}},
			incident.KindLink, []string{"libfabric", "no route to host", "UNDELIVERABLE"}, "remote process exited"},
		{"the proxy lost its client while polling", map[int][]snapshot.Event{
			1: {{Kind: snapshot.EventBreadcrumb, Code: 6, Msg: "misc/socket.cc:749 -> 6", Src: "misc/socket.cc", Stage: snapshot.StageInit},
				ev(snapshot.EventSocketError, snapshot.SocketProxyPoll, "", "Socket recv failed while polling for opId=0x1")}},
			incident.KindCrash, []string{"proxy lost its connection"}, "without a warning"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := offlineJob(tt.ev)
			for _, p := range j.Procs {
				p.Comms = nil
			}
			f := wantOne(t, evaluate(j), tt.kind, tt.say...)
			if strings.Contains(f.Summary, tt.avoid) {
				t.Errorf("summary %q says %q", f.Summary, tt.avoid)
			}
		})
	}
}

// TestStrayRemoteAllocator: NCCL before 2.12 answers any connection to its bootstrap's
// remote allocator; a stray one ends in "Allocation failed" and an OOM that is no GPU's.
func TestStrayRemoteAllocator(t *testing.T) {
	closed := snapshot.Event{Kind: snapshot.EventConnClosedRemote, Peer: "10.0.0.9<5>", Fatal: true, Msg: "Net : Connection closed by remote peer 10.0.0.9<5>"}
	crumb := snapshot.Event{Kind: snapshot.EventBreadcrumb, Code: 2, Msg: "bootstrap.cc:229 -> 2"}
	alloc := snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnRemAllocator, Msg: "[Rem Allocator] Allocation failed (segment 0, fd 9)"}
	oom := snapshot.Event{Kind: snapshot.EventCudaError, Detail: "out of memory", Fatal: true, Msg: "Cuda failure 'out of memory'"}
	f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{0: {closed, crumb, alloc, oom}})), incident.KindConfig, "stray connection")
	if f.Severity != incident.SeverityWarning || len(f.Evidence) != 3 {
		t.Errorf("severity %s evidence %q", f.Severity, f.Evidence)
	}
	// An OOM with no allocator failure before it is the GPU's.
	wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{0: {oom}})), incident.KindGPU, "ran out of memory")
}
