package heartbeat_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ncclwatch/watchdog/heartbeat"
	"github.com/ncclwatch/watchdog/heartbeat/profile/profiletest"
)

// TestBandwidthMetricsFromRegions: two simulated ranks of one communicator (the real plugin,
// called as NCCL calls it) complete all-reduces of 4 MiB and sends of 64 KiB; the sidecar's
// /metrics then carries their execution time and bytes by communicator, op and size bucket,
// and, where promtool is installed (`make promtool`), `promtool check metrics` finds nothing
// to say about the page.
func TestBandwidthMetricsFromRegions(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	var ranks []*profiletest.Rank
	for rank := range 2 {
		r := kit.Start(t, dir, env(rank, 2)...)
		// Ops 0-1: all-reduces of 1 Mi float32 on 2 channels; ops 2-3: a send and a receive of
		// 64 KiB int8 (the script's p2p datatype). Each runs from its kernel channels' start
		// (GPU timer 1000+op) to their stop (2000+op): 1 µs.
		r.Do("init 0 c0ffee00aa 2 "+string(rune('0'+rank)),
			"coll 0 AllReduce 1048576 2", "run 0 1 2", "coll 0 AllReduce 1048576 2", "run 1 1 2",
			"p2p 0 Send 1 65536", "run 2 1 1", "p2p 0 Recv 1 65536", "run 3 1 1")
		ranks = append(ranks, r)
	}
	reg := prometheus.NewRegistry()
	runLocalSidecar(t, t.TempDir(), func(o *heartbeat.Options) {
		o.ProfilerDirs, o.SampleEvery, o.Registerer = []string{dir}, 20*time.Millisecond, reg
	})
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	var page string
	scrape := func() string {
		resp, err := http.Get(srv.URL)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// What was done before the sidecar's first read is in the counters, not in the 30 s
	// gauges: one more all-reduce each after it.
	if waitFor(t, 10*time.Second, func() bool {
		return strings.Contains(scrape(), `ncclwatch_comm_op_duration_seconds_count{comm="0xc0ffee00",op="AllReduce",size_bucket="1MiB-16MiB"} 4`)
	}) < 0 {
		t.Fatalf("no all-reduce counted:\n%s", scrape())
	}
	for _, r := range ranks {
		r.Do("coll 0 AllReduce 1048576 2", "run 4 1 2")
	}
	want := []string{
		`ncclwatch_comm_op_duration_seconds_count{comm="0xc0ffee00",op="AllReduce",size_bucket="1MiB-16MiB"} 6`,
		`ncclwatch_comm_op_duration_seconds_sum{comm="0xc0ffee00",op="AllReduce",size_bucket="1MiB-16MiB"} 6e-06`,
		`ncclwatch_comm_op_bytes_total{comm="0xc0ffee00",op="AllReduce",size_bucket="1MiB-16MiB"} 2.5165824e+07`,
		// bus factor 2(n-1)/n = 1 for 2 ranks
		`ncclwatch_comm_op_bus_bytes_total{comm="0xc0ffee00",op="AllReduce",size_bucket="1MiB-16MiB"} 2.5165824e+07`,
		`ncclwatch_comm_op_duration_seconds_count{comm="0xc0ffee00",op="Send",size_bucket="64KiB-1MiB"} 2`,
		`ncclwatch_comm_op_duration_seconds_count{comm="0xc0ffee00",op="Recv",size_bucket="64KiB-1MiB"} 2`,
		// the two done in the window: 8 MiB over 2 µs
		`ncclwatch_comm_bus_bandwidth_bytes_per_second{comm="0xc0ffee00",op="AllReduce",size_bucket="1MiB-16MiB"} 4.194304e+12`,
	}
	ok := waitFor(t, 10*time.Second, func() bool {
		page = scrape()
		for _, w := range want {
			if !strings.Contains(page, w) {
				return false
			}
		}
		return true
	})
	if ok < 0 {
		var got []string
		for _, l := range strings.Split(page, "\n") {
			if strings.HasPrefix(l, "ncclwatch_comm_") {
				got = append(got, l)
			}
		}
		t.Fatalf("want\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (make promtool): the page's lint is left to TestMetricConventions")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(page)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || strings.TrimSpace(out.String()) != "" {
		t.Errorf("promtool check metrics on the sidecar's /metrics: %v\n%s", err, out.String())
	}
}
