package ibsim_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ncclwatch/watchdog/heartbeat/ibport"
	"github.com/ncclwatch/watchdog/heartbeat/ibport/ibsim"
)

func TestFormatRate(t *testing.T) {
	tests := []struct {
		width int
		speed string
		want  string
	}{
		{4, "NDR", "400 Gb/sec (4X NDR)"},
		{1, "NDR", "100 Gb/sec (1X NDR)"},
		{2, "NDR", "200 Gb/sec (2X NDR)"},
		{4, "HDR", "200 Gb/sec (4X HDR)"},
		{4, "EDR", "100 Gb/sec (4X EDR)"},
		{1, "EDR", "25 Gb/sec (1X EDR)"},
		{4, "FDR", "56 Gb/sec (4X FDR)"},
		{4, "FDR10", "40 Gb/sec (4X FDR10)"},
		{4, "QDR", "40 Gb/sec (4X QDR)"},
		{1, "SDR", "2.5 Gb/sec (1X SDR)"},
		{12, "SDR", "30 Gb/sec (12X SDR)"},
		{4, "XDR", "800 Gb/sec (4X XDR)"},
		{4, "", "10 Gb/sec (4X SDR)"}, // unknown speeds show as SDR, as in the kernel
	}
	for _, tt := range tests {
		got := ibsim.FormatRate(tt.width, tt.speed)
		if got != tt.want {
			t.Errorf("FormatRate(%d, %q) = %q, want %q", tt.width, tt.speed, got, tt.want)
		}
		gbps, width, _, err := ibport.ParseRate(got)
		if err != nil || width != strconv.Itoa(tt.width)+"X" || gbps <= 0 {
			t.Errorf("ParseRate(FormatRate(%d, %q)) = %v, %q, %v", tt.width, tt.speed, gbps, width, err)
		}
	}
}

// TestWritePortMatchesFixture checks ibsim against the hand-written kernel-format tree:
// same files, same bytes.
func TestWritePortMatchesFixture(t *testing.T) {
	fixture := filepath.Join("..", "testdata", "ib-healthy", "mlx5_0", "ports", "1")
	p := ibsim.NDR("mlx5_0", 1)
	p.Counters = readCounters(t, filepath.Join(fixture, "counters"))
	p.HWCounters = readCounters(t, filepath.Join(fixture, "hw_counters"))
	root := t.TempDir()
	if err := ibsim.WritePort(root, p); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, filepath.Join(root, "mlx5_0", "ports", "1"), fixture)

	roce := filepath.Join("..", "testdata", "roce", "mlx5_0", "ports", "1")
	p.Rate, p.LinkLayer = ibsim.FormatRate(4, "HDR"), "Ethernet"
	p.Counters = readCounters(t, filepath.Join(roce, "counters"))
	p.HWCounters = readCounters(t, filepath.Join(roce, "hw_counters"))
	root = t.TempDir()
	if err := ibsim.WritePort(root, p); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, filepath.Join(root, "mlx5_0", "ports", "1"), roce)

	down := filepath.Join("..", "testdata", "ib-down", "mlx5_3", "ports", "1")
	p = ibsim.Port{Device: "mlx5_3", Port: 1, State: "DOWN", PhysState: "Polling", Rate: ibsim.FormatRate(4, "SDR"),
		HWCounters: readCounters(t, filepath.Join(down, "hw_counters"))}
	root = t.TempDir()
	if err := ibsim.WritePort(root, p); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, filepath.Join(root, "mlx5_3", "ports", "1"), down)
}

func TestWriteNetIfMatchesFixture(t *testing.T) {
	root := t.TempDir()
	for _, n := range []ibsim.NetIf{
		{Name: "eth0", Physical: true, SpeedMbps: 100000, OperState: "up", CarrierChanges: 2,
			Stats: map[string]uint64{"rx_bytes": 918273645501, "tx_bytes": 1029384756012, "rx_dropped": 1204}},
		{Name: "eth1", Physical: true, SpeedMbps: -1, OperState: "down", CarrierChanges: 7},
		{Name: "docker0", SpeedMbps: -1, OperState: "down", CarrierChanges: 1},
	} {
		if err := ibsim.WriteNetIf(root, n); err != nil {
			t.Fatal(err)
		}
		compareTrees(t, filepath.Join(root, n.Name), filepath.Join("..", "testdata", "net", n.Name))
	}
}

func TestWriteErrors(t *testing.T) {
	root := t.TempDir()
	good := ibsim.NDR("mlx5_0", 1)
	bad := map[string]func(*ibsim.Port){
		"state":  func(p *ibsim.Port) { p.State = "UP" },
		"phys":   func(p *ibsim.Port) { p.PhysState = "Up" },
		"device": func(p *ibsim.Port) { p.Device = "../mlx5_0" },
		"port":   func(p *ibsim.Port) { p.Port = 0 },
	}
	for name, spoil := range bad {
		p := good
		spoil(&p)
		if err := ibsim.WritePort(root, p); err == nil {
			t.Errorf("%s: WritePort(%+v) succeeded", name, p)
		}
	}
	if err := ibsim.WriteNetIf(root, ibsim.NetIf{Name: "a/b"}); err == nil {
		t.Error("WriteNetIf with a slash in the name succeeded")
	}
}

// TestAtomicRewrite reads a file while it is rewritten between a short and a long value:
// every read must see one of them whole, and no temporary file may be left behind.
func TestAtomicRewrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "port_xmit_data")
	short, long := "7\n", "18446744073709551615\n"
	if err := ibsim.WriteFile(path, short); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 500 {
			v := short
			if i%2 == 0 {
				v = long
			}
			if err := ibsim.WriteFile(path, v); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 500 {
		b, err := os.ReadFile(path)
		if err != nil || (string(b) != short && string(b) != long) {
			t.Fatalf("read %q, %v", b, err)
		}
	}
	wg.Wait()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v, %v; want only the file", entries, err)
	}
}

func readCounters(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = v
	}
	return m
}

// compareTrees fails unless both trees hold the same regular files with the same bytes.
func compareTrees(t *testing.T, got, want string) {
	t.Helper()
	gotFiles, wantFiles := listFiles(t, got), listFiles(t, want)
	if !slices.Equal(gotFiles, wantFiles) {
		t.Errorf("%s holds\n%v\nwant (as %s)\n%v", got, gotFiles, want, wantFiles)
		return
	}
	for _, f := range gotFiles {
		g, err1 := os.ReadFile(filepath.Join(got, f))
		w, err2 := os.ReadFile(filepath.Join(want, f))
		if err1 != nil || err2 != nil || !bytes.Equal(g, w) {
			t.Errorf("%s: got %q (%v), want %q (%v)", f, g, err1, w, err2)
		}
	}
}

func listFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		files = append(files, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}
