package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// fleetOf books roots into records: each job runs on its nodes for hours, and roots are
// (job, incident) pairs.
type booking struct {
	job   string
	kind  incident.Kind
	cause incident.Cause
	at    time.Duration
	hosts []string
	gpu   string
	port  string
}

func fleetOf(t *testing.T, jobs map[string][]string, hours float64, roots []booking) []*JobRecord {
	t.Helper()
	recs := map[string]*JobRecord{}
	for job, nodes := range jobs {
		r := NewRecord(job)
		r.Expose(nodes, t0, time.Hour)
		for h := 0.25; h <= hours; h += 0.25 {
			r.Expose(nodes, t0.Add(time.Duration(h*float64(time.Hour))), time.Hour)
		}
		recs[job] = r
	}
	for i, b := range roots {
		inc := incident.Incident{ID: fmt.Sprintf("%s-%d", b.job, i), Kind: b.kind, Cause: b.cause, State: incident.StateOpen, Job: b.job,
			OpenedAt: t0.Add(b.at), LastSeen: t0.Add(b.at + 5*time.Minute), Revision: 1}
		for _, h := range b.hosts {
			inc.Culprits = append(inc.Culprits, incident.Culprit{Rank: -1, Host: h, GPU: b.gpu, Port: b.port})
		}
		parts, same := PartsOf(&inc, Places{})
		recs[b.job].Book(&inc, parts, same)
	}
	var out []*JobRecord
	for _, r := range recs {
		out = append(out, r)
	}
	return out
}

// TestJudge: which recurring roots open a node incident.
func TestJudge(t *testing.T) {
	// 40 nodes, 10 jobs of 4 nodes; node n0 is in jobs a and b, the rest in one job each.
	jobs := map[string][]string{}
	for j := 0; j < 10; j++ {
		name := string(rune('a' + j))
		for k := 0; k < 4; k++ {
			jobs[name] = append(jobs[name], fmt.Sprintf("n%d", j*4+k))
		}
	}
	jobs["b"][0] = "n0"
	h := time.Hour
	for _, tc := range []struct {
		name  string
		roots []booking
		want  []string // parts with a node incident
	}{
		{"a GPU throttling in two jobs", []booking{
			{job: "a", kind: incident.KindStraggler, cause: incident.CauseGPUThrottled, at: h, hosts: []string{"n0"}, gpu: "1b000"},
			{job: "b", kind: incident.KindStraggler, cause: incident.CauseGPUThrottled, at: 2 * h, hosts: []string{"n0"}, gpu: "1b000"},
		}, []string{"gpu:n0:1b000"}},
		{"a GPU throttling three times in one job", []booking{
			{job: "c", cause: incident.CauseGPUThrottled, kind: incident.KindStraggler, at: h, hosts: []string{"n8"}, gpu: "3d000"},
			{job: "c", cause: incident.CauseGPUThrottled, kind: incident.KindStraggler, at: 2 * h, hosts: []string{"n8"}, gpu: "3d000"},
			{job: "c", cause: incident.CauseGPUThrottled, kind: incident.KindStraggler, at: 3 * h, hosts: []string{"n8"}, gpu: "3d000"},
		}, []string{"gpu:n8:3d000"}},
		{"a slow host three times in one job is the job's own", []booking{
			{job: "c", cause: incident.CauseHostSlow, kind: incident.KindStraggler, at: h, hosts: []string{"n8"}},
			{job: "c", cause: incident.CauseHostSlow, kind: incident.KindStraggler, at: 2 * h, hosts: []string{"n8"}},
			{job: "c", cause: incident.CauseHostSlow, kind: incident.KindStraggler, at: 3 * h, hosts: []string{"n8"}},
		}, nil},
		{"a mismatch never blames a node", []booking{
			{job: "a", cause: incident.CauseMismatch, kind: incident.KindMismatch, at: h, hosts: []string{"n0"}},
			{job: "b", cause: incident.CauseMismatch, kind: incident.KindMismatch, at: h, hosts: []string{"n0"}},
		}, nil},
		{"a link to the same peer in two jobs: either end", []booking{
			{job: "a", cause: incident.CauseLink, kind: incident.KindStraggler, at: h, hosts: []string{"n0", "n1"}},
			{job: "b", cause: incident.CauseLink, kind: incident.KindStraggler, at: 2 * h, hosts: []string{"n0", "n1"}},
		}, nil},
		{"links of one node to two peers in two jobs", []booking{
			{job: "a", cause: incident.CauseLink, kind: incident.KindStraggler, at: h, hosts: []string{"n0", "n1"}},
			{job: "b", cause: incident.CauseLink, kind: incident.KindStraggler, at: 2 * h, hosts: []string{"n0", "n5"}},
		}, []string{"link:n0"}},
		{"a NIC port in two jobs", []booking{
			{job: "a", cause: incident.CauseLink, kind: incident.KindLink, at: h, hosts: []string{"n0"}, port: "mlx5_1:1"},
			{job: "b", cause: incident.CauseLink, kind: incident.KindLink, at: 2 * h, hosts: []string{"n0"}, port: "mlx5_1:1"},
		}, []string{"nic:n0:mlx5_1:1"}},
		{"a node where the whole fleet fails as often is not singled out", func() []booking {
			var bs []booking
			for j := 0; j < 10; j++ {
				for k := 0; k < 4; k++ {
					bs = append(bs, booking{job: string(rune('a' + j)), cause: incident.CauseHostStalled, kind: incident.KindHang,
						at: time.Duration(k+1) * h, hosts: []string{jobs[string(rune('a'+j))][k]}})
				}
			}
			return bs
		}(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := fleetOf(t, jobs, 8, tc.roots)
			now := t0.Add(8 * time.Hour)
			v := Aggregate(recs, nil, now, Config{})
			var got []string
			for _, ni := range Judge(v, map[string]*NodeIncident{}, now, Config{}) {
				got = append(got, ni.Part.Key())
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("node incidents %v, want %v", got, tc.want)
			}
		})
	}
}

// TestJudgeResolves: an open node incident resolves once its node ran CleanHours clean,
// and evidence from before does not open it again.
func TestJudgeResolves(t *testing.T) {
	jobs := map[string][]string{"a": {"n0", "n1"}, "b": {"n0", "n2"}, "c": {"n3", "n4"}}
	roots := []booking{
		{job: "a", kind: incident.KindGPU, cause: incident.CauseGPUFault, at: time.Hour, hosts: []string{"n0"}, gpu: "1b000"},
		{job: "b", kind: incident.KindGPU, cause: incident.CauseGPUFault, at: time.Hour, hosts: []string{"n0"}, gpu: "1b000"},
	}
	recs := fleetOf(t, jobs, 40, roots)
	cfg := Config{CleanHours: 24}
	at := t0.Add(2 * time.Hour)
	opened := Judge(Aggregate(recs, nil, at, cfg), map[string]*NodeIncident{}, at, cfg)
	if len(opened) != 1 {
		t.Fatalf("opened %d, want 1", len(opened))
	}
	stored := map[string]*NodeIncident{opened[0].Part.Key(): opened[0]}
	// n0 runs two jobs: 24 job-hours clean after 12 hours.
	at = t0.Add(10 * time.Hour)
	if ch := Judge(Aggregate(recs, nil, at, cfg), stored, at, cfg); len(ch) != 0 {
		t.Fatalf("changed after 18 clean job-hours: %+v", ch[0].Incident)
	}
	at = t0.Add(14 * time.Hour)
	ch := Judge(Aggregate(recs, nil, at, cfg), stored, at, cfg)
	if len(ch) != 1 || ch[0].Incident.State != incident.StateResolved || ch[0].Incident.Revision != 2 {
		t.Fatalf("after 26 clean job-hours: %+v, want resolved at revision 2", ch)
	}
	stored[ch[0].Part.Key()] = ch[0]
	at = t0.Add(20 * time.Hour)
	if again := Judge(Aggregate(recs, nil, at, cfg), stored, at, cfg); len(again) != 0 {
		t.Errorf("reopened on the old evidence: %+v", again[0].Incident)
	}
}

func TestPoissonTail(t *testing.T) {
	for _, tc := range []struct {
		k      int
		lambda float64
		want   float64
	}{{0, 1, 1}, {1, 0, 0}, {1, 1, 0.6321205588}, {2, 0.05, 0.0012091042}, {10, 0.01, 2.7307e-27}} {
		got := PoissonTail(tc.k, tc.lambda)
		if d := got/max(tc.want, 1e-300) - 1; (tc.want == 0 && got != 0) || (tc.want != 0 && (d > 1e-3 || d < -1e-3)) {
			t.Errorf("P(X>=%d | %g) = %g, want %g", tc.k, tc.lambda, got, tc.want)
		}
	}
}

// FuzzPartsOf: any culprit text gives parts with safe node names or none, never a panic.
func FuzzPartsOf(f *testing.F) {
	f.Add("node7", "3 (bus 1b000)", "mlx5_1:1", string(incident.CauseGPUThrottled))
	f.Add("?", "", "", string(incident.CauseLink))
	f.Add("a\nb", "(bus ", "", string(incident.CauseDied))
	f.Fuzz(func(t *testing.T, host, gpu, port, cause string) {
		inc := incident.Incident{Kind: incident.KindStraggler, Cause: incident.Cause(cause),
			Culprits: []incident.Culprit{{Rank: 1, Host: host, GPU: gpu, Port: port}, {Rank: 2, Host: host + "x"}}}
		parts, _ := PartsOf(&inc, Places{})
		for _, p := range parts {
			if !usableHost(p.Node) {
				t.Fatalf("part on node %q", p.Node)
			}
			ni := &NodeIncident{Part: p}
			for _, a := range Suggest(ni, ActionConfig{}) {
				for _, arg := range a.Command {
					if strings.Contains(arg, p.Node) && arg[0] == '-' {
						t.Fatalf("argument %q could be read as a flag", arg)
					}
				}
			}
		}
	})
}
