package detect

import (
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

func TestStraggler(t *testing.T) {
	cfg := DefaultConfig()
	period := 100 * time.Millisecond
	t.Run("constant 60 ms late", func(t *testing.T) {
		fs := Straggler(job(5*time.Second, rank(0, 60, period, 0, nil), rank(1, 60, period, 60*time.Millisecond, nil), rank(2, 60, period, time.Millisecond, nil)), cfg, TimingOK)
		f := only(t, fs, incident.KindStraggler)
		if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.LagSeconds < 0.055 || f.LagSeconds > 0.065 {
			t.Fatalf("culprits %v lag %.3f", got, f.LagSeconds)
		}
	})
	t.Run("onset", func(t *testing.T) {
		late := rank(1, 60, period, 0, func(s int64, o *snapshot.Op) {
			if s >= 25 {
				o.T += snapshot.Micros(80 * time.Millisecond / time.Microsecond)
			}
		})
		f := only(t, Straggler(job(10*time.Second, rank(0, 60, period, 0, nil), late), cfg, TimingOK), incident.KindStraggler)
		if f.Seq != 25 {
			t.Fatalf("onset at %d, want 25", f.Seq)
		}
	})
	t.Run("jitter below 20 ms is not a straggler", func(t *testing.T) {
		fs := Straggler(job(5*time.Second, rank(0, 60, period, 0, nil), rank(1, 60, period, 8*time.Millisecond, nil)), cfg, TimingOK)
		if len(fs) != 0 {
			t.Fatalf("%+v", fs)
		}
	})
	t.Run("no claim without usable timing", func(t *testing.T) {
		fs := Straggler(job(5*time.Second, rank(0, 60, period, 0, nil), rank(1, 60, period, 60*time.Millisecond, nil)), cfg, TimingNone)
		if len(fs) != 0 {
			t.Fatalf("%+v", fs)
		}
	})
}
