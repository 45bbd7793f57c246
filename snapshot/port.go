package snapshot

// PortKind tells an HCA port from a network interface.
type PortKind string

const (
	PortIB  PortKind = "ib"  // an InfiniBand or RoCE HCA port (/sys/class/infiniband)
	PortNet PortKind = "net" // a network interface (/sys/class/net)
)

// The port states the rules compare against, spelled as sysfs spells them.
const (
	PortActive = "ACTIVE" // an HCA port's state when it carries traffic
	NetUp      = "up"     // a network interface's operstate when it carries traffic
)

// Port is one network port: an InfiniBand/RoCE HCA port or a net interface
// (produced by heartbeat/ibport).
//
// Zero or empty values mean "unknown", not "zero": a field whose sysfs file could not be
// read is left empty and counted in ReadErrs, so a rule never mistakes an unreadable rate
// for a link that trained at 0 Gb/s.
type Port struct {
	Kind      PortKind `json:"k"`
	Device    string   `json:"dev"` // "mlx5_1" or "eth0"
	Port      int      `json:"port,omitempty"`
	LinkLayer string   `json:"ll,omitempty"`    // ib: "InfiniBand" or "Ethernet" (RoCE)
	State     string   `json:"state"`           // as sysfs says it: PortActive, "DOWN", ... / NetUp, "down"
	PhysState string   `json:"phys,omitempty"`  // "LinkUp", "Polling", ...
	RateGbps  float64  `json:"gbps"`            // negotiated rate; 0 = unknown (net: speed -1)
	Width     string   `json:"width,omitempty"` // "4X"
	Speed     string   `json:"speed,omitempty"` // "NDR"
	// Counter deltas since the previous sample and the sample interval.
	// Keys are the sysfs file names (ib: counters/ and hw_counters/ entries such as
	// "symbol_error" or "np_cnp_sent"; net: statistics/ entries and "carrier_changes").
	// Values are in the kernel's units (port_xmit_data/port_rcv_data count 4-octet words).
	// Zero deltas are left out; a counter that went backwards (reset) reports its new value.
	IntervalS    float64           `json:"dt,omitempty"`
	Deltas       map[string]uint64 `json:"d,omitempty"`
	XmitGbps     float64           `json:"txgbps,omitempty"`
	RecvGbps     float64           `json:"rxgbps,omitempty"`
	XmitWaitPerS float64           `json:"waitps,omitempty"`
	// ReadErrs counts the fields of this port that could not be read in this sample.
	ReadErrs int    `json:"rerr,omitempty"`
	T        Micros `json:"t"`
}
