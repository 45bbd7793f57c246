package detect

import (
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestKnowledgeMatches: an event takes the first row that holds for it.
func TestKnowledgeMatches(t *testing.T) {
	j := offlineJob(nil)
	m := &messages{j: j}
	p := j.Procs[1]
	for _, c := range []struct {
		e    snapshot.Event
		want string // "" for no row, or an ignoring one
	}{
		{snapshot.Event{Kind: snapshot.EventIBCompletion, Code: 12, Stage: snapshot.StageRun}, "ib_retry"},
		{snapshot.Event{Kind: snapshot.EventIBCompletion, Code: 12, Stage: snapshot.StageInit}, "ib_retry_early"},
		{snapshot.Event{Kind: snapshot.EventIBCompletion, Code: 12}, "ib_retry_undated"},
		{snapshot.Event{Kind: snapshot.EventIBCompletion, Code: 7, Stage: snapshot.StageRun}, "ib_completion"},
		{snapshot.Event{Kind: snapshot.EventIBAsync, Detail: "port active"}, ""},
		{snapshot.Event{Kind: snapshot.EventIBAsync, Detail: "port error", Fatal: true}, "ib_async_port"},
		{snapshot.Event{Kind: snapshot.EventCudaError, Detail: "out of memory"}, "cuda_oom"},
		{snapshot.Event{Kind: snapshot.EventCudaError, Detail: "invalid argument", Src: "transport/nvls.cc"}, "cuda_nvls"},
		{snapshot.Event{Kind: snapshot.EventCudaError, Detail: "invalid argument", Src: snapshot.SrcTorchWatchdog}, "cuda_watchdog"},
		{snapshot.Event{Kind: snapshot.EventSocketConnect, Fatal: true, Peer: "127.0.0.1<5>"}, "connect_loopback"},
		{snapshot.Event{Kind: snapshot.EventSocketConnect, Fatal: true, Peer: "10.0.0.2<5>", Detail: "Connection refused"}, "connect_refused"},
		{snapshot.Event{Kind: snapshot.EventSocketConnect, Peer: "10.0.0.2<5>", Stage: snapshot.StageRun}, ""},
		{snapshot.Event{Kind: snapshot.EventConnClosedRemote, Peer: "10.0.0.2<5>", Stage: snapshot.StageRun}, "break_closed"},
		{snapshot.Event{Kind: snapshot.EventSocketError, Peer: "10.9.9.9<5>", Detail: "Connection reset by peer", Stage: snapshot.StageRun}, "break_path"},
		{snapshot.Event{Kind: snapshot.EventTorchStore, Detail: "Connection reset by peer"}, ""},
		{snapshot.Event{Kind: snapshot.EventTorchStore, Ranks: []int{0}, Detail: "Connection reset by peer"}, "store_peer_gone"},
		{snapshot.Event{Kind: snapshot.EventWarn, Msg: "Failed to open libibverbs.so[.1]"}, ""},
		{snapshot.Event{Kind: snapshot.EventWarn, Msg: "something new", Stage: snapshot.StageRun}, "warn_unknown"},
		{snapshot.Event{Kind: snapshot.EventWarn, Msg: "something new"}, "warn_quoted"},
		{snapshot.Event{Kind: snapshot.EventTorchTimeout}, ""},
	} {
		got := ""
		if ev := m.match(p, c.e); ev != nil {
			got = ev.r.ID
		}
		if got != c.want {
			t.Errorf("%s code %d %q: row %q, want %q", c.e.Kind, c.e.Code, c.e.Detail+c.e.Msg, got, c.want)
		}
	}
}

// TestUnknownMessages: a WARN or a network plugin's warning that no row knows, and connect
// retries that end without a WARN in a rank that never finished init, still make a finding
// that quotes them; any known cause outranks them.
func TestUnknownMessages(t *testing.T) {
	warn := snapshot.Event{Kind: snapshot.EventWarn, Msg: "NET/IB : something nobody wrote down", Src: "transport/net_ib.cc", Stage: snapshot.StageRun}
	plugin := snapshot.Event{Kind: snapshot.EventNetError, Msg: "NET/OFI Unexpected provider state", Stage: snapshot.StageRun}
	retry := snapshot.Event{Kind: snapshot.EventSocketConnect, Peer: "10.0.0.2<4000>", Detail: "Connection refused", Stage: snapshot.StageInit,
		Msg: "ncclSocketConnect: connect to 10.0.0.2<4000> returned Connection refused, retrying (20/34)"}
	oom := snapshot.Event{Kind: snapshot.EventCudaError, Detail: "out of memory", Fatal: true, Stage: snapshot.StageRun, Msg: "Cuda failure 'out of memory'"}
	for _, c := range []struct {
		name   string
		ev     map[int][]snapshot.Event
		stuck  bool // rank 1 never finished init (live: offline, the init hang names it)
		kind   incident.Kind
		sev    incident.Severity
		say    string
		rank   int // the culprit's, and its host
		host   string
		quoted string
	}{
		{"an unknown WARN", map[int][]snapshot.Event{2: {warn}}, false, incident.KindNCCLWarning, incident.SeverityWarning, "something nobody wrote down", 2, "gpu-b", warn.Msg},
		{"a network plugin's unknown warning", map[int][]snapshot.Event{3: {plugin}}, false, incident.KindNCCLWarning, incident.SeverityWarning, "Unexpected provider state", 3, "gpu-b", plugin.Msg},
		{"connect retries that never succeed", map[int][]snapshot.Event{1: {retry, retry}}, true, incident.KindConfig, incident.SeverityWarning, "kept retrying to connect to gpu-b", -1, "gpu-b", retry.Msg},
		{"a known cause outranks an unknown WARN", map[int][]snapshot.Event{2: {warn}, 1: {oom}}, false, incident.KindGPU, incident.SeverityCritical, "ran out of memory", 1, "gpu-a", oom.Msg},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := offlineJob(c.ev)
			if c.stuck {
				j.Procs[1].Comms[0].State = snapshot.CommInit
				j.Offline = false
			}
			f := wantOne(t, evaluate(j), c.kind, c.say)
			if f.Severity != c.sev || len(f.Culprits) == 0 || f.Culprits[0].Rank != c.rank || f.Culprits[0].Host != c.host || !strings.Contains(strings.Join(f.Evidence, "\n"), c.quoted) {
				t.Errorf("severity %s culprits %+v evidence %q", f.Severity, f.Culprits, f.Evidence)
			}
			if (f.Cause == incident.CauseUnknown) != (f.Kind == incident.KindNCCLWarning) {
				t.Errorf("cause class %q for a %s", f.Cause, f.Kind)
			}
		})
	}
	// Retries in a rank that went on past init succeeded.
	if fs := evaluate(offlineJob(map[int][]snapshot.Event{1: {retry}})); len(fs) != 0 {
		t.Fatalf("retries that succeeded: %+v", fs)
	}
}
