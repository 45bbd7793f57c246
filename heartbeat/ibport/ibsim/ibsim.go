// Package ibsim writes sysfs trees in the kernel's format: InfiniBand/RoCE HCA ports as under
// /sys/class/infiniband and network interfaces as under /sys/class/net. The job simulator
// writes a healthy fabric, then rewrites it degraded (a port trained at 1X, rising symbol
// errors, a link down) while a sampler reads it; tests build fixtures the same way.
//
// Every file is replaced atomically (a temporary file renamed over it), so a concurrent
// reader sees the old value or the new one, never a half-written number. A tree as a whole
// is not written atomically, as the kernel's is not read atomically either.
package ibsim

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// Port is one HCA port as the kernel shows it under <root>/<Device>/ports/<Port>/.
type Port struct {
	Device string // "mlx5_0"
	Port   int    // 1-based
	// State is the logical state: "NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER".
	State string
	// PhysState is the physical state: "Sleep", "Polling", "Disabled",
	// "PortConfigurationTraining", "LinkUp", "LinkErrorRecovery", "Phy Test".
	PhysState string
	// Rate is the rate file's text without its newline, e.g. FormatRate(4, "NDR").
	Rate      string
	LinkLayer string // "InfiniBand" (when empty) or "Ethernet" for RoCE
	// Counters are files under counters/. The standard set is always written, with 0 for
	// names not given; other names are written as given.
	Counters map[string]uint64
	// HWCounters are files under hw_counters/; when nil no such directory is written.
	HWCounters map[string]uint64
}

// NDR returns a healthy 400 Gb/s InfiniBand port: ACTIVE, LinkUp, 4X NDR, zero counters.
func NDR(device string, port int) Port {
	return Port{
		Device: device, Port: port, State: "ACTIVE", PhysState: "LinkUp",
		Rate: FormatRate(4, "NDR"), LinkLayer: "InfiniBand",
	}
}

// StandardCounters are the files a port's counters/ directory holds on mlx5.
var StandardCounters = []string{
	"VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
	"local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
	"port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
	"port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
	"port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards",
	"port_xmit_packets", "port_xmit_wait", "symbol_error", "unicast_rcv_packets",
	"unicast_xmit_packets",
}

// Per-lane signalling rates in tenths of Gb/s, as the kernel's rate_show computes them.
var laneRate = map[string]int{
	"SDR": 25, "DDR": 50, "QDR": 100, "FDR10": 100, "FDR": 140,
	"EDR": 250, "HDR": 500, "NDR": 1000, "XDR": 2000,
}

// FormatRate returns the rate text the kernel prints for a width (lanes) and speed name:
// FormatRate(4, "NDR") is "400 Gb/sec (4X NDR)", FormatRate(1, "SDR") "2.5 Gb/sec (1X SDR)".
// An unknown speed is shown as SDR, as the kernel does.
func FormatRate(width int, speed string) string {
	lane, ok := laneRate[speed]
	if !ok {
		speed, lane = "SDR", laneRate["SDR"]
	}
	r := lane * width
	half := ""
	if r%10 != 0 {
		half = ".5"
	}
	return fmt.Sprintf("%d%s Gb/sec (%dX %s)", r/10, half, width, speed)
}

var portStates = []string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

var physStates = []string{
	"<unknown>", "Sleep", "Polling", "Disabled", "PortConfigurationTraining", "LinkUp",
	"LinkErrorRecovery", "Phy Test",
}

// WritePort writes (or rewrites) one port's files under root, creating directories as needed.
func WritePort(root string, p Port) error {
	if p.Device == "" || filepath.Base(p.Device) != p.Device || p.Port < 1 {
		return fmt.Errorf("ibsim: bad port %q/%d", p.Device, p.Port)
	}
	state := slices.Index(portStates, p.State)
	if state < 0 {
		return fmt.Errorf("ibsim: %s/%d: unknown state %q", p.Device, p.Port, p.State)
	}
	phys := slices.Index(physStates, p.PhysState)
	if phys < 1 {
		return fmt.Errorf("ibsim: %s/%d: unknown phys_state %q", p.Device, p.Port, p.PhysState)
	}
	dir := filepath.Join(root, p.Device, "ports", strconv.Itoa(p.Port))
	files := []file{
		{"state", fmt.Sprintf("%d: %s\n", state, p.State)},
		{"phys_state", fmt.Sprintf("%d: %s\n", phys, p.PhysState)},
		{"rate", p.Rate + "\n"},
		{"link_layer", cmp.Or(p.LinkLayer, "InfiniBand") + "\n"},
	}
	for _, name := range StandardCounters {
		files = append(files, counterFile("counters/"+name, p.Counters[name]))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Counters)) {
		if !slices.Contains(StandardCounters, name) {
			files = append(files, counterFile("counters/"+name, p.Counters[name]))
		}
	}
	if p.HWCounters != nil {
		if err := os.MkdirAll(filepath.Join(dir, "hw_counters"), 0o755); err != nil {
			return fmt.Errorf("ibsim: %w", err)
		}
		for _, name := range slices.Sorted(maps.Keys(p.HWCounters)) {
			files = append(files, counterFile("hw_counters/"+name, p.HWCounters[name]))
		}
	}
	return writeFiles(dir, files)
}

// NetIf is one network interface as the kernel shows it under <root>/<Name>/.
type NetIf struct {
	Name string // "eth0"
	// Physical interfaces have a device link (to their PCI function); virtual ones
	// (bridges, veths) do not.
	Physical bool
	// SpeedMbps is the speed file; -1 is what the kernel shows for a link without carrier.
	SpeedMbps      int
	OperState      string // "up", "down", "lowerlayerdown", "unknown", ...
	CarrierChanges uint64
	// Stats are files under statistics/; rx/tx bytes, packets, errors and dropped are
	// always written, with 0 for names not given.
	Stats map[string]uint64
}

var standardStats = []string{
	"rx_bytes", "rx_dropped", "rx_errors", "rx_packets",
	"tx_bytes", "tx_dropped", "tx_errors", "tx_packets",
}

// WriteNetIf writes (or rewrites) one interface's files under root. Only tests and the
// sampler's benchmark (ibport's BenchmarkSample) call it: jobsim's nodes have no net
// interfaces (the demo points NetRoot at an empty directory).
func WriteNetIf(root string, n NetIf) error {
	if n.Name == "" || filepath.Base(n.Name) != n.Name {
		return fmt.Errorf("ibsim: bad interface name %q", n.Name)
	}
	dir := filepath.Join(root, n.Name)
	files := []file{
		{"operstate", cmp.Or(n.OperState, "unknown") + "\n"},
		{"speed", strconv.Itoa(n.SpeedMbps) + "\n"},
		counterFile("carrier_changes", n.CarrierChanges),
	}
	if n.Physical {
		// In sysfs, device is a symlink to the PCI function's directory; a directory
		// with that function's vendor file stands in for it.
		files = append(files, file{"device/vendor", "0x15b3\n"})
	}
	for _, name := range standardStats {
		files = append(files, counterFile("statistics/"+name, n.Stats[name]))
	}
	for _, name := range slices.Sorted(maps.Keys(n.Stats)) {
		if !slices.Contains(standardStats, name) {
			files = append(files, counterFile("statistics/"+name, n.Stats[name]))
		}
	}
	return writeFiles(dir, files)
}

type file struct{ name, content string }

func counterFile(name string, v uint64) file {
	return file{name, strconv.FormatUint(v, 10) + "\n"}
}

func writeFiles(dir string, files []file) error {
	var errs []error
	for _, f := range files {
		if err := WriteFile(filepath.Join(dir, f.name), f.content); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ibsim: %w", err)
	}
	return nil
}

// WriteFile replaces one file atomically: it writes a temporary file beside it and renames
// it over the old one. Use it for single fields, e.g. to bump one counter.
func WriteFile(path, content string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, werr := tmp.WriteString(content)
	cerr := tmp.Close()
	if err := cmp.Or(werr, cerr, os.Chmod(tmp.Name(), 0o444)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
