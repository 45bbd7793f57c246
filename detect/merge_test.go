package detect

import (
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestDeathsAfterTheRootCause: on real GPUs a hung job is killed by PyTorch's timeout or the
// launcher; those deaths must not become incidents of their own, and a hang must not turn
// into a crash because its rank was killed a minute later. A real crash stays a crash.
func TestDeathsAfterTheRootCause(t *testing.T) {
	cfg := DefaultConfig()
	exited := func(p *Proc, at time.Duration) *Proc {
		p.State, p.ExitedAt = "exited", us(at)
		return p
	}
	for _, c := range []struct {
		name         string
		now          time.Duration
		exit0, exit1 time.Duration // when rank 0 (ahead) and rank 1 (behind) exited
		want         incident.Kind
	}{
		{"hang, then everyone killed", 80 * time.Second, 75 * time.Second, 75 * time.Second, incident.KindHang},
		{"crash, then the survivor killed", 40 * time.Second, 20 * time.Second, 2100 * time.Millisecond, incident.KindCrash},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := job(c.now, exited(rank(0, 30, 100*time.Millisecond, 0, nil), c.exit0),
				exited(rank(1, 20, 100*time.Millisecond, 0, nil), c.exit1))
			res := Evaluate(j, cfg, TimingOK)
			if len(res.Findings) != 1 || res.Findings[0].Kind != c.want || culpritRanks(res.Findings[0])[0] != 1 {
				t.Fatalf("%+v", res.Findings)
			}
		})
	}
}

// One rank's broken step seen on two communicators (the live one and a Flight Recorder
// dump's, whose identity differs) is one cause: one finding, the first seen leading.
func TestOneMismatchPerCulprit(t *testing.T) {
	mism := func(comm string, at time.Duration) Finding {
		return Finding{Kind: incident.KindMismatch, Severity: incident.SeverityCritical, Comm: comm, Key: "mismatch:" + comm,
			culpritKeys: []string{"node1:101"}, Culprits: []incident.Culprit{{Rank: 1, Host: "node1", PID: 101}}, FaultAt: t0.Add(at),
			Summary: "mismatch on " + comm}
	}
	other := mism("tp", time.Second)
	other.culpritKeys, other.Key = []string{"node3:103"}, "mismatch:tp"
	fs := findings{mism: []Finding{mism("pg0-fr-dump", 5*time.Second), mism("0xc0ffee", 2*time.Second), other}}
	explain(nil, DefaultConfig(), &fs, "mismatch")
	if len(fs.mism) != 2 || fs.mism[0].Key != "mismatch:0xc0ffee" || fs.mism[1].Key != "mismatch:tp" || len(fs.mism[0].Evidence) != 1 {
		t.Fatalf("%+v", fs.mism)
	}
}

// A rank whose host issues late (CPU starvation) also runs its network proxy late: the slow
// sends the plugin measures from it are its doing (live on one H200, cpu_starve paged a slow
// link to a rank that only received).
func TestALateHostExplainsItsSlowLinks(t *testing.T) {
	strag := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Cause: incident.CauseHostSlow,
		Key: "rank:vm:1", culpritKeys: []string{"vm:1"}, Summary: "rank 1 is a straggler"}
	link := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Cause: incident.CauseLink, measured: true,
		Key: "link:pair:vm:1->vm:3", culpritKeys: []string{"vm:1", "vm:3"}, Summary: "the network from rank 1 to rank 3 is slow"}
	fs := findings{rest: []Finding{strag}, links: []Finding{link}}
	explain(nil, DefaultConfig(), &fs, "neighbours")
	if len(fs.links) != 0 || len(fs.rest[0].Evidence) != 1 {
		t.Fatalf("links %+v, straggler evidence %v", fs.links, fs.rest[0].Evidence)
	}
}

// NCCL RAS names a rank of a split communicator the logs know by hash alone: while a
// straggler is named, the skew is its lateness caught between two launches (live on one
// H200, host lag on rank 3 was named, then a culprit-less "RAS reports rank 3 of
// communicator 0x968a... behind" warning opened beside it).
func TestARootExplainsAnUnmappedRASSkew(t *testing.T) {
	strag := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Cause: incident.CauseHostSlow,
		Key: "rank:vm:3", culpritKeys: []string{"vm:3"}, Summary: "rank 3 is a straggler", role: knowledge.RoleNote}
	skew := Finding{Kind: incident.KindHang, Severity: incident.SeverityWarning, Key: "ras:0x968a/3",
		Culprits: []incident.Culprit{{Rank: -1}}, Summary: "NCCL RAS reports rank 3 of communicator 0x968a behind", role: knowledge.RoleRAS}
	fs := findings{}
	fs.add(strag, skew)
	explain(nil, DefaultConfig(), &fs, "ras")
	if all := fs.all(); len(all) != 1 || all[0].Key != strag.Key || len(all[0].Evidence) != 1 {
		t.Fatalf("%+v", all)
	}
}

// A slow NIC fills its peers' buffers: a smaller slow pair upstream of it on its communicator
// is its back-pressure (live on one H200, a throttled rank 0 was named, then a pair 2->3 at
// 135 against 38 µs opened beside it, naming two ranks that only waited).
func TestASlowNICExplainsTheBackPressureOnItsCommunicator(t *testing.T) {
	nic := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Cause: incident.CauseLink, measured: true, Comm: "c",
		Key: "link:nic:vm:0", culpritKeys: []string{"vm:0"}, origin: knowledge.NIC, Summary: "the network of rank 0 is slow"}
	pair := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Cause: incident.CauseLink, measured: true, Comm: "c",
		Key: "link:pair:vm:2->vm:3", culpritKeys: []string{"vm:2", "vm:3"}, Summary: "the network from rank 2 to rank 3 is slow"}
	elsewhere := pair
	elsewhere.Comm, elsewhere.Key = "d", "link:pair:vm:4->vm:5"
	fs := findings{links: []Finding{nic, pair, elsewhere}}
	explain(nil, DefaultConfig(), &fs, "back-pressure")
	if len(fs.links) != 2 || fs.links[1].Key != elsewhere.Key || len(fs.links[0].Evidence) != 1 {
		t.Fatalf("links %+v", fs.links)
	}
}

// A mismatch's members are stuck inside the mismatched op: a hang naming one of them on
// another communicator, and a message size its receiver did not expect, are the mismatch's
// (live on one H200, a wrong op on a data-parallel pair paged a size disagreement and named
// the partner hung on the world communicator).
func TestAMismatchExplainsItsMembersAndTheSizes(t *testing.T) {
	ps := []*Proc{rank(0, 10, fakePeriod, 0, nil), rank(1, 10, fakePeriod, 0, nil), rank(2, 10, fakePeriod, 0, nil), rank(3, 10, fakePeriod, 0, nil)}
	for _, r := range []int{1, 3} {
		dp := ps[r].Comms[0]
		dp.ID, dp.Rank, dp.NRanks = "dp13", r/2, 2
		ps[r].Comms = append(ps[r].Comms, dp)
	}
	j := job(20*time.Second, ps...)
	mism := Finding{Kind: incident.KindMismatch, Severity: incident.SeverityCritical, Comm: "dp13", Key: "mismatch:dp13",
		culpritKeys: []string{ps[3].Key()}, Summary: "mismatch on dp13"}
	hang := Finding{Kind: incident.KindHang, Severity: incident.SeverityWarning, Comm: "0xc0ffee", Key: "rank:" + ps[1].Key(),
		culpritKeys: []string{ps[1].Key()}, Summary: "rank 1's GPU has not started the world op"}
	other := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Comm: "0xc0ffee", Key: "rank:" + ps[2].Key(),
		culpritKeys: []string{ps[2].Key()}, Summary: "rank 2 stopped"}
	size := Finding{Kind: incident.KindLink, Severity: incident.SeverityCritical, Key: "net-size:node3", Summary: "a message of another size",
		origin: knowledge.NetSize}
	fs := findings{mism: []Finding{mism}, stalls: []Finding{hang, other}, rest: []Finding{size}}
	explain(j, DefaultConfig(), &fs, "mismatch-comm")
	if len(fs.stalls) != 1 || fs.stalls[0].Key != other.Key || len(fs.rest) != 0 || len(fs.mism[0].Evidence) != 2 {
		t.Fatalf("stalls %+v rest %+v mismatch evidence %v", fs.stalls, fs.rest, fs.mism[0].Evidence)
	}
}

// The launcher kills a job after its root cause: the kills are one teardown line of that
// root, whatever the root's kind, and no crash stands beside it (an order inversion or a
// hang is keyed by its rank as the crash of that rank is: the fold goes by the finding, not
// the key). A closure a survivor saw when the root left is that root's witness, never the
// kill that came long after (pg_destroyed on one H200: the witness dated rank 2's kill and
// made it a crash).
func TestTheLaunchersKillsAreTheRootsTeardown(t *testing.T) {
	cfg := DefaultConfig()
	procs := make([]*Proc, 4)
	for r := range procs {
		procs[r] = &Proc{Process: snapshot.Process{Host: "node0", PID: 1000 + r, Rank: r, LocalRank: r}, Node: "node0"}
	}
	j := &Job{Procs: procs, Offline: true}
	on := func(kind incident.Kind, r int, at time.Duration) Finding {
		p := procs[r]
		return Finding{Kind: kind, Severity: incident.SeverityCritical, Key: "rank:" + p.Key(), culpritKeys: []string{p.Key()},
			Culprits: []incident.Culprit{p.Culprit()}, FaultAt: t0.Add(at), Summary: string(kind)}
	}
	killed := func() []Finding {
		var out []Finding
		for _, r := range []int{0, 1, 3, 2} {
			out = append(out, on(incident.KindCrash, r, 30*time.Second+time.Duration(r)*50*time.Millisecond))
		}
		return out
	}
	undated := func(f Finding) Finding { f.FaultAt = time.Time{}; return f }
	witness := Finding{Kind: incident.KindCrash, Severity: incident.SeverityCritical, witness: true, Key: "conn:node0",
		Culprits: []incident.Culprit{{Rank: -1, Host: "node0"}}, FaultAt: t0.Add(12 * time.Second), Summary: "connection closed"}
	for _, c := range []struct {
		name string
		fs   findings
		want incident.Kind
		rank int
	}{
		{"inversion", findings{inversions: []Finding{on(incident.KindOrderInversion, 2, 0)}, crashes: killed()}, incident.KindOrderInversion, 2},
		{"undated inversion", findings{inversions: []Finding{undated(on(incident.KindOrderInversion, 2, 0))}, crashes: killed()},
			incident.KindOrderInversion, 2},
		{"mismatch", findings{mism: []Finding{on(incident.KindMismatch, 3, 10*time.Second)}, crashes: killed()}, incident.KindMismatch, 3},
		{"frozen rank", findings{stalls: []Finding{on(incident.KindHang, 2, 10*time.Second)}, crashes: killed()}, incident.KindHang, 2},
		{"left rank, witnessed", findings{stalls: []Finding{on(incident.KindHang, 2, 10*time.Second)},
			crashes: append(killed(), witness)}, incident.KindHang, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := c.fs
			explain(j, cfg, &fs)
			all := fs.all()
			if len(all) != 1 || all[0].Kind != c.want || culpritRanks(all[0])[0] != c.rank {
				t.Fatalf("want one %s, got %+v", c.want, all)
			}
			if !strings.Contains(strings.Join(all[0].Evidence, "\n"), teardownPrefix+"4 ranks") {
				t.Fatalf("no teardown line: %q", all[0].Evidence)
			}
		})
	}
}

// TestReasoners: every reasoner the explains table names is one merge.go has, and each one
// is named.
func TestReasoners(t *testing.T) {
	named := map[string]bool{}
	for _, r := range knowledge.Explains {
		if r.Action == "reason" {
			if named[r.Step] = true; reasoners[r.Step] == nil {
				t.Errorf("the table names reasoner %q, which merge.go lacks", r.Step)
			}
		}
	}
	for name := range reasoners {
		if !named[name] {
			t.Errorf("reasoner %q is in no row of the table", name)
		}
	}
}

// TestVersionsExplainSizes: ranks that load different NCCL versions disagree on message
// sizes: NCCL's own warning of it, like the versions the ranks printed, explains the sizes.
func TestVersionsExplainSizes(t *testing.T) {
	version := snapshot.Event{Kind: snapshot.EventVersionMismatch, Stage: snapshot.StageInit, Ranks: []int{2},
		Detail: "2.18.1 and 2.19.3", Msg: "NCCL version mismatch"}
	size := snapshot.Event{Kind: snapshot.EventNetSizeMismatch, Stage: snapshot.StageRun, Peer: "10.0.0.1<4000>",
		Msg: "NET/IB : Message truncated : received 1048576 bytes instead of 65536"}
	f := wantOne(t, evaluate(offlineJob(map[int][]snapshot.Event{0: {version}, 2: {size}})), incident.KindConfig, "different NCCL versions")
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "also: NET/IB on") {
		t.Fatalf("the size mismatch is not the versions' evidence: %q", f.Evidence)
	}
}
