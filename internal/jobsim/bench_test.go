package jobsim

import (
	"testing"
)

// BenchmarkGenerate measures fast mode on the default job shape (4 nodes x 8 ranks, µs
// timestamps): log lines written per second, IB sysfs trees excluded (New writes them).
func BenchmarkGenerate(b *testing.B) {
	benchGenerate(b, Config{Steps: 200, Timestamps: true})
}

// BenchmarkGenerateLarge is the load generator's shape: 64 nodes, no sysfs trees.
func BenchmarkGenerateLarge(b *testing.B) {
	benchGenerate(b, Config{Nodes: 64, Steps: 20, Timestamps: true, LogsOnly: true})
}

func benchGenerate(b *testing.B, cfg Config) {
	var lines, bytes int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg.Seed = int64(i)
		s, err := New(cfg, b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := s.Generate(); err != nil {
			b.Fatal(err)
		}
		st := s.Stats()
		lines += st.Lines
		bytes += st.Bytes
	}
	b.ReportMetric(float64(lines)/b.Elapsed().Seconds(), "lines/s")
	b.SetBytes(bytes / int64(b.N))
}
