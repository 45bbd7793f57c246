// Package ibport samples a node's network ports from sysfs for the sidecar: InfiniBand and
// RoCE HCA ports (/sys/class/infiniband) and net interfaces (/sys/class/net). Each sample
// reports link state, the negotiated rate split into width and speed (a 4X NDR port that
// trained at 1X or at HDR is the "slow link" the detector looks for), and counters as
// deltas and rates since the previous sample.
//
// Reading is best effort: a missing or unreadable file leaves its field unknown, is counted
// and logged (once per change, not once per second), and the rest of the port is kept.
package ibport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

const (
	DefaultIBRoot  = "/sys/class/infiniband"
	DefaultNetRoot = "/sys/class/net"

	// MaxPorts caps the ports in one sample, and so the node snapshot: a host with SR-IOV
	// can expose hundreds of virtual functions, each with its own HCA and interface.
	MaxPorts = 256
	// maxTracked caps the sampler's memory of ports, including the virtual interfaces it
	// remembers to skip (a Kubernetes node can have hundreds of veths).
	maxTracked = 4096
)

// Options configures a Sampler. The zero value samples every HCA port and every physical
// net interface under the real sysfs.
type Options struct {
	// IBRoot and NetRoot default to DefaultIBRoot and DefaultNetRoot. A root that does not
	// exist yields no ports and no error: a node may have no HCA.
	IBRoot  string
	NetRoot string
	// Interfaces, when set, names the net interfaces to sample, virtual ones included;
	// when empty, all interfaces with a device link are sampled except lo.
	Interfaces []string
	Now        func() time.Time // default time.Now
	Logger     *slog.Logger     // default slog.Default()
}

// Sampler reads port state and counters; it remembers each port's previous counters to
// report deltas. Safe for concurrent use, though one goroutine sampling is the intent.
type Sampler struct {
	ibRoot, netRoot string
	interfaces      []string
	now             func() time.Time
	log             *slog.Logger

	readErrors atomic.Uint64

	mu    sync.Mutex
	gen   uint64 // sample number; ports not seen in the latest sample are forgotten
	ports map[portKey]*portState
	buf   [256]byte // holds one sysfs value at a time
	// rootErr holds the last logged error per root or named interface, to log changes only.
	rootErr  map[string]string
	skipped  int // ports left out by maxPorts or maxTracked in the last sample
	maxPorts int // MaxPorts; smaller in tests
}

// New returns a Sampler; it touches no file until the first Sample.
func New(o Options) *Sampler {
	s := &Sampler{
		ibRoot:     cmp.Or(o.IBRoot, DefaultIBRoot),
		netRoot:    cmp.Or(o.NetRoot, DefaultNetRoot),
		interfaces: slices.Clone(o.Interfaces),
		now:        o.Now,
		log:        o.Logger,
		ports:      make(map[portKey]*portState),
		rootErr:    make(map[string]string),
		maxPorts:   MaxPorts,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// ReadErrors is the number of port fields that could not be read, over all samples.
func (s *Sampler) ReadErrors() uint64 { return s.readErrors.Load() }

type portKey struct {
	kind, dev, port string // port is "" for net interfaces
}

// portState is what the sampler keeps per port between samples. Its file paths are built
// once, when the port is first seen, not on every sample.
type portState struct {
	gen  uint64
	kind string
	dev  string
	port int
	skip bool // a virtual net interface nobody asked for

	state, phys, rate, linkLayer, speed textFile

	ctrs []counter
	// Indexes into ctrs of the transmitted and received data counters and of
	// port_xmit_wait, -1 if absent; bitsPerUnit converts the data counters to bits.
	xmit, rcv, wait int
	bitsPerUnit     float64
	last            time.Time // time of the previous sample, zero before the first
	errs            int       // read errors in the previous sample, to log changes only
}

// textFile is a sysfs attribute whose parsed value is kept until its text changes, so an
// unchanged port costs no parsing and no allocation.
type textFile struct {
	path   string
	raw    string // text as last read, trimmed
	parsed string
	gbps   float64 // rate only
	width  string  // rate only
}

type counter struct {
	name, path string
	prev       uint64
	hasPrev    bool
	// optional counters (hw_counters) may be missing on some drivers without it being an error.
	optional bool
	delta    uint64
	fresh    bool // delta is valid for this sample
}

// Sample reads every port once. It returns an error only when nothing could be read at
// all (neither root listed, no named interface found) or ctx ended; partial failures are
// logged, counted in ReadErrors and in each Port's ReadErrs.
// Ports come sorted by kind, device (mlx5_2 before mlx5_10) and port number.
func (s *Sampler) Sample(ctx context.Context) ([]snapshot.Port, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.gen++
	out := make([]snapshot.Port, 0, min(len(s.ports), s.maxPorts))
	skipped := 0

	ibErr := s.sampleIB(ctx, now, &out, &skipped)
	netErr := s.sampleNet(ctx, now, &out, &skipped)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sample ports: %w", err)
	}
	for k, st := range s.ports {
		if st.gen != s.gen {
			delete(s.ports, k)
		}
	}
	if skipped != s.skipped {
		if skipped > 0 {
			s.log.Warn("ibport: too many ports, some left out", "skipped", skipped, "max", s.maxPorts)
		}
		s.skipped = skipped
	}
	slices.SortFunc(out, comparePorts)
	if len(out) == 0 && ibErr != nil && netErr != nil {
		return nil, fmt.Errorf("sample ports: %w", errors.Join(ibErr, netErr))
	}
	return out, nil
}

// sampleIB appends one Port per HCA port. Its error is the failure to list the root:
// a missing root is reported (the node may simply have no HCA) but neither logged nor
// counted.
func (s *Sampler) sampleIB(ctx context.Context, now time.Time, out *[]snapshot.Port, skipped *int) error {
	devs, err := s.listRoot(s.ibRoot)
	if err != nil {
		return err
	}
	for _, dev := range devs {
		if ctx.Err() != nil {
			return nil
		}
		if strings.HasPrefix(dev, ".") {
			continue
		}
		portsDir := filepath.Join(s.ibRoot, dev, "ports")
		ports, err := readDirNames(portsDir)
		if err != nil {
			s.readErrors.Add(1)
			s.noteRootErr(portsDir, err)
			continue
		}
		s.noteRootErr(portsDir, nil)
		for _, p := range ports {
			n, err := strconv.Atoi(p)
			if err != nil || n < 0 {
				continue
			}
			if len(*out) >= s.maxPorts {
				*skipped++
				continue
			}
			st := s.track(portKey{"ib", dev, p}, func() *portState { return newIBPort(s.ibRoot, dev, n) })
			if st == nil {
				*skipped++
				continue
			}
			*out = append(*out, s.readIB(st, now))
		}
	}
	return nil
}

func (s *Sampler) sampleNet(ctx context.Context, now time.Time, out *[]snapshot.Port, skipped *int) error {
	names := s.interfaces
	named := len(names) > 0
	if !named {
		var err error
		if names, err = s.listRoot(s.netRoot); err != nil {
			return err
		}
	}
	var found bool
	var missing error
	for _, name := range names {
		if ctx.Err() != nil {
			return nil
		}
		if !named && (name == "lo" || strings.HasPrefix(name, ".")) {
			continue
		}
		dir := filepath.Join(s.netRoot, name)
		if named {
			// An interface asked for by name and missing is an error; one that is
			// merely absent among all interfaces is nothing.
			_, err := os.Stat(dir)
			s.noteRootErr(dir, err)
			if err != nil {
				s.readErrors.Add(1)
				missing = cmp.Or(missing, err)
				continue
			}
			found = true
		}
		st := s.track(portKey{"net", name, ""}, func() *portState { return newNetPort(dir, name, named) })
		if st == nil {
			*skipped++
			continue
		}
		if st.skip {
			continue
		}
		if len(*out) >= s.maxPorts {
			// Forget it, so that its counters start afresh if it is ever read.
			delete(s.ports, portKey{"net", name, ""})
			*skipped++
			continue
		}
		*out = append(*out, s.readNet(st, now))
	}
	if found {
		return nil
	}
	return missing // nil unless every named interface is missing
}

// listRoot lists a sysfs class directory. Only errors other than a missing root are
// logged and counted: a node without HCAs has no /sys/class/infiniband.
func (s *Sampler) listRoot(root string) ([]string, error) {
	names, err := readDirNames(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.readErrors.Add(1)
		s.noteRootErr(root, err)
	} else {
		s.noteRootErr(root, nil)
	}
	return names, err
}

// noteRootErr logs a directory-level error when it first appears or changes, and its
// recovery; the map holds at most the roots, devices and named interfaces.
func (s *Sampler) noteRootErr(dir string, err error) {
	prev, had := s.rootErr[dir]
	switch {
	case err == nil && had:
		delete(s.rootErr, dir)
		s.log.Info("ibport: directory readable again", "dir", dir)
	case err != nil && (!had || prev != err.Error()):
		if len(s.rootErr) < maxTracked {
			s.rootErr[dir] = err.Error()
		}
		s.log.Warn("ibport: cannot read directory", "dir", dir, "err", err)
	}
}

// track returns the state of a port seen in this sample, creating it on first sight;
// nil when the sampler already tracks maxTracked ports.
func (s *Sampler) track(k portKey, create func() *portState) *portState {
	st, ok := s.ports[k]
	if !ok {
		if len(s.ports) >= maxTracked {
			return nil
		}
		st = create()
		s.ports[k] = st
	}
	st.gen = s.gen
	return st
}

// The IB counters every port has under counters/, and the hw_counters/ entries worth
// watching when the driver provides them (RoCE congestion control and retransmission,
// receive-buffer starvation, transport timeouts).
var (
	ibCounters = []string{
		"symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
		"port_xmit_discards", "port_xmit_wait", "port_xmit_data", "port_rcv_data",
		"local_link_integrity_errors", "excessive_buffer_overrun_errors",
	}
	ibHWCounters = []string{
		"out_of_sequence", "packet_seq_err", "np_cnp_sent", "rp_cnp_handled",
		"roce_adp_retrans", "roce_adp_retrans_to", "local_ack_timeout_err",
		"rnr_nak_retry_err", "implied_nak_seq_err", "out_of_buffer",
		"np_ecn_marked_roce_packets",
	}
	netCounters = []string{
		"carrier_changes", "statistics/rx_errors", "statistics/tx_errors",
		"statistics/rx_dropped", "statistics/tx_dropped", "statistics/rx_bytes",
		"statistics/tx_bytes",
	}
)

func newIBPort(root, dev string, port int) *portState {
	dir := filepath.Join(root, dev, "ports", strconv.Itoa(port))
	st := &portState{
		kind: "ib", dev: dev, port: port,
		state:     textFile{path: filepath.Join(dir, "state")},
		phys:      textFile{path: filepath.Join(dir, "phys_state")},
		rate:      textFile{path: filepath.Join(dir, "rate")},
		linkLayer: textFile{path: filepath.Join(dir, "link_layer")},
		// port_xmit_data and port_rcv_data count 4-octet words.
		bitsPerUnit: 32,
	}
	// A driver without a counters/ directory has no PMA counters at all; reading ten
	// missing files every second would only repeat one fact.
	if fi, err := os.Stat(filepath.Join(dir, "counters")); err != nil || !fi.IsDir() {
		st.xmit, st.rcv, st.wait = -1, -1, -1
	} else {
		for _, name := range ibCounters {
			st.ctrs = append(st.ctrs, counter{name: name, path: filepath.Join(dir, "counters", name)})
		}
		st.xmit = slices.Index(ibCounters, "port_xmit_data")
		st.rcv = slices.Index(ibCounters, "port_rcv_data")
		st.wait = slices.Index(ibCounters, "port_xmit_wait")
	}
	for _, name := range ibHWCounters {
		path := filepath.Join(dir, "hw_counters", name)
		if _, err := os.Stat(path); err == nil {
			st.ctrs = append(st.ctrs, counter{name: name, path: path, optional: true})
		}
	}
	return st
}

func newNetPort(dir, name string, named bool) *portState {
	// Physical interfaces (and SR-IOV functions) have a device link; bridges, veths,
	// bonds and tunnels do not, and are skipped unless asked for by name.
	if _, err := os.Lstat(filepath.Join(dir, "device")); err != nil && !named {
		return &portState{kind: "net", dev: name, skip: true}
	}
	st := &portState{
		kind: "net", dev: name,
		state:       textFile{path: filepath.Join(dir, "operstate")},
		speed:       textFile{path: filepath.Join(dir, "speed")},
		xmit:        slices.Index(netCounters, "statistics/tx_bytes"),
		rcv:         slices.Index(netCounters, "statistics/rx_bytes"),
		wait:        -1,
		bitsPerUnit: 8,
	}
	for _, name := range netCounters {
		st.ctrs = append(st.ctrs, counter{name: strings.TrimPrefix(name, "statistics/"), path: filepath.Join(dir, name)})
	}
	return st
}

// portRead collects one port's read errors during a sample.
type portRead struct {
	errs  int
	first error
}

func (r *portRead) fail(err error) {
	r.errs++
	if r.first == nil {
		r.first = err
	}
}

func (s *Sampler) readIB(st *portState, now time.Time) snapshot.Port {
	p := snapshot.Port{Kind: snapshot.PortIB, Device: st.dev, Port: st.port, T: snapshot.MicrosOf(now)}
	var r portRead
	if st.linkLayer.raw == "" { // never changes while the port exists
		s.readText(&st.linkLayer, &r, identity)
	}
	p.LinkLayer = st.linkLayer.parsed
	if s.readText(&st.state, &r, ParseState) {
		p.State = st.state.parsed
	}
	if s.readText(&st.phys, &r, ParseState) {
		p.PhysState = st.phys.parsed
	}
	if s.readText(&st.rate, &r, st.rate.parseRate) {
		p.RateGbps, p.Width, p.Speed = st.rate.gbps, st.rate.width, st.rate.parsed
	}
	s.readCounters(st, &p, now, &r)
	s.finish(st, &p, &r)
	return p
}

func (s *Sampler) readNet(st *portState, now time.Time) snapshot.Port {
	p := snapshot.Port{Kind: snapshot.PortNet, Device: st.dev, T: snapshot.MicrosOf(now)}
	var r portRead
	if s.readText(&st.state, &r, identity) {
		p.State = st.state.parsed
	}
	// The kernel refuses to read speed (EINVAL) on an interface that is down; that is
	// "unknown", like -1, not a failure.
	if b, err := s.read(st.speed.path); err == nil {
		if mbps, err := parseSpeedMbps(b); err == nil {
			p.RateGbps = float64(mbps) / 1000
		} else {
			r.fail(fmt.Errorf("%s: %w", st.speed.path, err))
		}
	}
	s.readCounters(st, &p, now, &r)
	s.finish(st, &p, &r)
	return p
}

// readText reads a text attribute and parses it when it changed. It reports whether
// the field is known in this sample.
func (s *Sampler) readText(f *textFile, r *portRead, parse func(string) (string, error)) bool {
	b, err := s.read(f.path)
	if err != nil {
		r.fail(err)
		return false
	}
	b = trimSpace(b)
	if f.raw != "" && string(b) == f.raw {
		return true
	}
	raw := string(b)
	v, err := parse(raw)
	if err != nil {
		f.raw = ""
		r.fail(fmt.Errorf("%s: %w", f.path, err))
		return false
	}
	f.raw, f.parsed = raw, v
	return true
}

func identity(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty")
	}
	return s, nil
}

// parseRate fits ParseRate into readText: the speed is the parsed string, and the
// number and width are kept beside it.
func (f *textFile) parseRate(s string) (string, error) {
	gbps, width, speed, err := ParseRate(s)
	if err != nil {
		return "", err
	}
	f.gbps, f.width = gbps, width
	return speed, nil
}

// readCounters reads every counter, computes deltas against the previous sample, and
// fills the Port's deltas and rates.
func (s *Sampler) readCounters(st *portState, p *snapshot.Port, now time.Time, r *portRead) {
	for i := range st.ctrs {
		c := &st.ctrs[i]
		c.fresh = false
		b, err := s.read(c.path)
		var v uint64
		if err == nil {
			v, err = parseCounter(b)
			if err != nil && !errors.Is(err, errNotAvailable) {
				err = fmt.Errorf("%s: %w", c.path, err)
			}
		}
		if err != nil {
			c.hasPrev = false
			if errors.Is(err, errNotAvailable) || unsupported(err) ||
				c.optional && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			r.fail(err)
			continue
		}
		if c.hasPrev {
			c.delta, c.fresh = v-c.prev, true
			if v < c.prev {
				// A reset (perfquery -R, driver reload): the new value counts from the
				// reset, which happened within this interval. Wrapping would report ~2^64.
				c.delta = v
			}
			if c.delta != 0 {
				if p.Deltas == nil {
					p.Deltas = make(map[string]uint64, 4)
				}
				p.Deltas[c.name] = c.delta
			}
		}
		c.prev, c.hasPrev = v, true
	}

	if !st.last.IsZero() {
		if dt := now.Sub(st.last).Seconds(); dt > 0 {
			p.IntervalS = round3(dt)
			p.XmitGbps = st.rateOf(st.xmit, st.bitsPerUnit/1e9/dt)
			p.RecvGbps = st.rateOf(st.rcv, st.bitsPerUnit/1e9/dt)
			p.XmitWaitPerS = st.rateOf(st.wait, 1/dt)
		}
	}
	st.last = now
}

func (st *portState) rateOf(i int, scale float64) float64 {
	if i < 0 || !st.ctrs[i].fresh {
		return 0
	}
	return round3(float64(st.ctrs[i].delta) * scale)
}

// round3 keeps rates and intervals to a thousandth (1 Mb/s, 1 ms): finer digits are
// noise and cost bytes in every snapshot.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// finish records a port's read errors and logs when their number changes.
func (s *Sampler) finish(st *portState, p *snapshot.Port, r *portRead) {
	p.ReadErrs = r.errs
	if r.errs > 0 {
		s.readErrors.Add(uint64(r.errs))
	}
	if r.errs != st.errs {
		if r.errs > 0 {
			s.log.Warn("ibport: some port fields unreadable", "kind", st.kind, "dev", st.dev,
				"port", st.port, "errors", r.errs, "first", r.first)
		} else {
			s.log.Info("ibport: port fields readable again", "kind", st.kind, "dev", st.dev, "port", st.port)
		}
		st.errs = r.errs
	}
}

// read returns a file's content in the sampler's buffer, valid until the next read.
func (s *Sampler) read(path string) ([]byte, error) {
	n, err := readSmall(path, s.buf[:])
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return s.buf[:n], nil
}

var errTooLong = errors.New("value longer than expected for a sysfs attribute")

// readDirNames lists a directory in natural order, so that the ports kept under
// MaxPorts are the same from one sample to the next.
func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.SortFunc(names, naturalCompare)
	return names, err
}

func comparePorts(a, b snapshot.Port) int {
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	if c := naturalCompare(a.Device, b.Device); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// naturalCompare orders names with numbers by value: mlx5_2 before mlx5_10.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitPrefix(s string) int {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}
