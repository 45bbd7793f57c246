package detect

import (
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/snapshot"
)

func TestDuplicateHostnames(t *testing.T) {
	proc := func(host string, pid int, nccl string, addrs []string, transports ...string) *Proc {
		return &Proc{Process: snapshot.Process{Host: host, PID: pid, Rank: -1, LocalRank: -1, CudaDev: 0, NCCL: nccl,
			Addrs: addrs, Transports: transports}, Node: host}
	}
	cases := []struct {
		name  string
		procs []*Proc
		want  string // a word of the summary, "" for no finding
	}{
		{"two machines under one name, joined by P2P",
			[]*Proc{proc("gpu", 11, "", []string{"10.4.0.1"}, "P2P/IPC"), proc("gpu", 12, "", []string{"10.4.0.1"}),
				proc("gpu", 21, "", []string{"10.4.0.2"}, "P2P/IPC")},
			"gpu pid 11 and gpu pid 21 both call their host gpu"},
		{"one machine, one address", []*Proc{proc("gpu", 11, "", []string{"10.4.0.1"}, "P2P/IPC"), proc("gpu", 12, "", []string{"10.4.0.1"}, "P2P/IPC")}, ""},
		{"one machine, several interfaces", []*Proc{proc("gpu", 11, "", []string{"10.4.0.1", "10.5.0.1"}, "SHM/direct/direct"), proc("gpu", 12, "", []string{"10.5.0.1"})}, ""},
		{"no intra-host transport", []*Proc{proc("gpu", 11, "", []string{"10.4.0.1"}, "NET/Socket/0"), proc("gpu", 21, "", []string{"10.4.0.2"})}, ""},
		{"NCCL 2.4+ hashes the boot id", []*Proc{proc("gpu", 11, "2.18.3", []string{"10.4.0.1"}, "P2P/IPC"), proc("gpu", 21, "2.18.3", []string{"10.4.0.2"}, "P2P/IPC")}, ""},
		{"NCCL 2.2 does not", []*Proc{proc("gpu", 11, "2.2.13", []string{"10.4.0.1"}, "P2P/IPC"), proc("gpu", 21, "2.2.13", []string{"10.4.0.2"})}, "NCCL before 2.4"},
		{"different names", []*Proc{proc("gpu-a", 11, "", []string{"10.4.0.1"}, "P2P/IPC"), proc("gpu-b", 21, "", []string{"10.4.0.2"}, "P2P/IPC")}, ""},
		{"an address unknown", []*Proc{proc("gpu", 11, "", []string{"10.4.0.1"}, "P2P/IPC"), proc("gpu", 21, "", nil, "P2P/IPC")}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := duplicateHostnames(job(0, c.procs...))
			switch {
			case c.want == "" && len(fs) != 0:
				t.Fatalf("finding %q, want none", fs[0].Summary)
			case c.want != "" && (len(fs) != 1 || !strings.Contains(fs[0].Summary, c.want)):
				t.Fatalf("findings %+v, want one saying %q", fs, c.want)
			case c.want != "" && len(fs[0].Culprits) != 2:
				t.Fatalf("culprits %+v, want both processes", fs[0].Culprits)
			}
		})
	}
}

// A poster's redaction is kept as written: "172...." is not the host "172".
func TestPeerNameKeepsRedactedAddresses(t *testing.T) {
	cases := [][2]string{{"10.0.0.8<50123>", "10.0.0.8"}, {"node2.cluster<42830>", "node2"}, {"172....<33759>", "172...."},
		{"10.x.x.x<33759>", "10.x.x.x"}, {"fe80::1%ib0<33397>", "fe80::1"}, {"node..redacted<1>", "node..redacted"}}
	for _, c := range cases {
		if got := peerName(c[0]); got != c[1] {
			t.Errorf("peerName(%q) = %q, want %q", c[0], got, c[1])
		}
	}
}
