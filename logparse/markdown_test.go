package logparse

import "testing"

// Each case is a posted line and how it reads unlinked ("" when Unlink leaves it alone).
func TestUnlink(t *testing.T) {
	for _, c := range [][2]string{
		{"> gpu7:4242:4250 [2] transport/[net_ib.cc:101](http://net_ib.cc:101/) NCCL WARN NET/IB : mlx5_0:1 Got async event : port error",
			"> gpu7:4242:4250 [2] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_0:1 Got async event : port error"},
		{"peer [10.9.8.7](http://10.9.8.7/)<40001> localGid ::ffff:[10.9.8.6](https://10.9.8.6/) x", "peer 10.9.8.7<40001> localGid ::ffff:10.9.8.6 x"},
		{"gpu7:4242:4250 [2] NCCL INFO [proxy.cc:698] -> 6", ""},
		{"a [b](http x) c", "a [b](http x) c"}, // a space in the target: not a link
		{"a [b](http://x", "a [b](http://x"},   // unclosed
		{"a [[b]](http://x) c", "a [[b]](http://x) c"},
		{"[a](http://a) [b](http c", "a [b](http c"},
	} {
		line, want := c[0], c[1]
		got, ok := Unlink(nil, []byte(line))
		switch {
		case want == "" && (ok || string(got) != line):
			t.Errorf("Unlink(%q) = %q, %v; want it untouched", line, got, ok)
		case want != "" && (!ok || string(got) != want):
			t.Errorf("Unlink(%q)\n got  %q, %v\n want %q", line, got, ok, want)
		}
	}
}

func TestTestFailureSource(t *testing.T) {
	cases := []struct {
		line, kind, host string
		pid              int
	}{
		{"gpu-node-3: Test NCCL failure common.cu:1291 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '", "torch_nccl_error", "gpu-node-3", 0},
		{" .. gpu-node-3 pid 90210: Test failure common.cu:1165", "unknown", "gpu-node-3", 90210},
		{" .. gpu-node-3 pid 90210: Test NCCL failure common.cu:958 'unhandled system error'", "torch_nccl_error", "gpu-node-3", 90210},
		{"gpu-node-3: Test CUDA failure common.cu:941 'invalid device ordinal'", "cuda_error", "gpu-node-3", 0},
		{"Test NCCL failure common.cu:958 'unhandled system error'", "torch_nccl_error", "", 0},
		{"we saw a Test failure here", "unknown", "", 0},
	}
	var l Line
	for _, c := range cases {
		Parse([]byte(c.line), &l)
		if l.Kind.String() != c.kind || string(l.Torch.Host) != c.host || l.Torch.PID != c.pid {
			t.Errorf("%q: kind %s host %q pid %d; want %s %q %d", c.line, l.Kind, l.Torch.Host, l.Torch.PID, c.kind, c.host, c.pid)
		}
	}
}
