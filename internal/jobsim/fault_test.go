package jobsim

import (
	"testing"
	"time"
)

func TestParseFault(t *testing.T) {
	tests := []struct {
		in   string
		want Fault
		err  bool
	}{
		{in: "skip:5:10", want: Fault{Kind: FaultSkip, Rank: 5, Step: 10, Op: -1}},
		{in: "skip:5:10:op=3", want: Fault{Kind: FaultSkip, Rank: 5, Step: 10, Op: 3}},
		{in: "crash:3:20:4", want: Fault{Kind: FaultCrash, Rank: 3, Step: 20, Op: 4}},
		{in: "wrong-size:9:12:count=1000", want: Fault{Kind: FaultWrongSize, Rank: 9, Step: 12, Op: -1, Count: 1000}},
		{in: "straggler:7:0:200ms", want: Fault{Kind: FaultStraggler, Rank: 7, Op: -1, Delay: 200 * time.Millisecond}},
		{in: "straggler:7:30:delay=150ms", want: Fault{Kind: FaultStraggler, Rank: 7, Step: 30, Op: -1, Delay: 150 * time.Millisecond}},
		{in: "ib-port:2:10:down,warn", want: Fault{Kind: FaultIBPort, Rank: 2, Step: 10, Op: -1, Down: true, Warn: true}},
		{in: "ib-port:2:10:mlx5_5", want: Fault{Kind: FaultIBPort, Rank: 2, Step: 10, Op: -1, Port: "mlx5_5"}},
		{in: "xid:4:8:79", want: Fault{Kind: FaultXID, Rank: 4, Step: 8, Op: -1, XID: 79}},
		{in: "pause:0:20:30s", want: Fault{Kind: FaultPause, Step: 20, Op: -1, Duration: 30 * time.Second}},
		{in: "STUCK:0:25", want: Fault{Kind: FaultStuck, Step: 25, Op: -1}},
		{in: "skip:5", err: true},
		{in: "boom:1:2", err: true},
		{in: "skip:-1:2", err: true},
		{in: "skip:1:x", err: true},
		{in: "straggler:1:2:soon", err: true},
		{in: "skip:1:2:color=3", err: true},
	}
	for _, tt := range tests {
		got, err := ParseFault(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("ParseFault(%q) error %v, want error %t", tt.in, err, tt.err)
			continue
		}
		if err != nil {
			continue
		}
		if got != tt.want {
			t.Errorf("ParseFault(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		again, err := ParseFault(got.String())
		if err != nil || again != got {
			t.Errorf("ParseFault(%q.String() = %q) = %+v, %v", tt.in, got.String(), again, err)
		}
	}
}

func TestPythonTupleColor(t *testing.T) {
	// The real capture: new_group([0, 1]) printed color 2130503744.
	if got := pythonTupleColor([]int{0, 1}); got != 2130503744 {
		t.Errorf("color of (0, 1) = %d, want 2130503744", got)
	}
	// abs(hash((0,))) % 2**31 and abs(hash((8, 9, 10))) % 2**31, from CPython 3.11.
	for _, tt := range []struct {
		ranks []int
		want  int
	}{{[]int{0}, 59908776}, {[]int{8, 9, 10}, 1663593033}} {
		if got := pythonTupleColor(tt.ranks); got != tt.want {
			t.Errorf("color of %v = %d, want %d", tt.ranks, got, tt.want)
		}
	}
}

func TestNewRejects(t *testing.T) {
	dir := t.TempDir()
	bad := []Config{
		{RanksPerNode: 9},
		{Nodes: 3, PipelineStages: 2},
		{Version: "2.17"},
		{Version: "3.0.0"},
		{Version: "2.23", Timestamps: true},
		{StepTime: time.Second, Jitter: time.Second},
		{Steps: 10, Faults: []Fault{{Kind: FaultSkip, Rank: 0, Step: 10, Op: -1}}},
		{Faults: []Fault{{Kind: FaultSkip, Rank: 99, Step: 1, Op: -1}}},
		{Faults: []Fault{{Kind: FaultStraggler, Rank: 1, Step: 1}}},
		{Faults: []Fault{{Kind: FaultIBPort, Rank: 1, Step: 1, Port: "mlx5_9"}}},
		{Faults: []Fault{{Kind: FaultSilent, Rank: 1, Step: 1, Op: 999}}},
		{PipelineStages: 2, Faults: []Fault{{Kind: FaultSkip, Rank: 16, Step: 1, Op: 0}}}, // op 0 of stage 1 is a Recv
	}
	for _, cfg := range bad {
		cfg.LogsOnly = true
		if _, err := New(cfg, dir); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
