package snapshot

// Port is one network port: an InfiniBand/RoCE HCA port or a net interface
// (produced by heartbeat/ibport).
type Port struct {
	Kind      string  `json:"k"`   // "ib" or "net"
	Device    string  `json:"dev"` // "mlx5_1" or "eth0"
	Port      int     `json:"port,omitempty"`
	State     string  `json:"state"`          // "ACTIVE", "DOWN", ... / operstate "up", "down"
	PhysState string  `json:"phys,omitempty"` // "LinkUp", "Polling", ...
	RateGbps  float64 `json:"gbps"`
	Width     string  `json:"width,omitempty"` // "4X"
	Speed     string  `json:"speed,omitempty"` // "NDR"
	// Counter deltas since the previous sample and the sample interval.
	IntervalS    float64           `json:"dt,omitempty"`
	Deltas       map[string]uint64 `json:"d,omitempty"`
	XmitGbps     float64           `json:"txgbps,omitempty"`
	RecvGbps     float64           `json:"rxgbps,omitempty"`
	XmitWaitPerS float64           `json:"waitps,omitempty"`
	T            Micros            `json:"t"`
}
