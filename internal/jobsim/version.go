package jobsim

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultVersion is the NCCL release simulated when Config.Version is empty: the one of the
// real captures under testdata/captures.
const DefaultVersion = "2.28.9"

// latestPatch is the newest release of each minor version whose log formats were checked
// against NCCL's source at its release tag (v2.MINOR.PATCH-1); the dialect methods below
// are what was found.
var latestPatch = map[int]int{
	18: 6, 19: 4, 20: 5, 21: 5, 22: 3, 23: 4, 24: 3, 25: 1, 26: 6, 27: 7, 28: 9, 29: 7, 30: 7,
}

// dialect is one NCCL release's way of printing: every format difference the simulator
// reproduces is a method here, keyed by the release, so that a line writer asks "how does
// this release print X" and never compares versions itself.
type dialect struct {
	minor, patch int
}

// parseDialect accepts "2.28.9", "2.28" (newest checked patch) or "2.28.9-1".
func parseDialect(v string) (dialect, error) {
	if v == "" {
		v = DefaultVersion
	}
	s := strings.TrimSuffix(strings.TrimSpace(v), "-1")
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "2" {
		return dialect{}, fmt.Errorf("jobsim: NCCL version %q: want 2.MINOR[.PATCH], e.g. 2.28.9", v)
	}
	minor, err := strconv.Atoi(parts[1])
	if err != nil {
		return dialect{}, fmt.Errorf("jobsim: NCCL version %q: %w", v, err)
	}
	newest, ok := latestPatch[minor]
	if !ok {
		return dialect{}, fmt.Errorf("jobsim: NCCL version %q: only 2.18 to 2.30 are simulated", v)
	}
	patch := newest
	if len(parts) == 3 {
		if patch, err = strconv.Atoi(parts[2]); err != nil || patch < 0 {
			return dialect{}, fmt.Errorf("jobsim: NCCL version %q: bad patch", v)
		}
	}
	return dialect{minor: minor, patch: patch}, nil
}

func (d dialect) String() string { return fmt.Sprintf("2.%d.%d", d.minor, d.patch) }

// ge reports whether the release is 2.minor.patch or newer.
func (d dialect) ge(minor, patch int) bool {
	return d.minor > minor || (d.minor == minor && d.patch >= patch)
}

func (d dialect) cuda() string {
	switch {
	case d.minor <= 20:
		return "12.2"
	case d.minor <= 23:
		return "12.4"
	case d.minor <= 26:
		return "12.8"
	case d.minor == 27:
		return "12.9"
	}
	return "13.0"
}

func (d dialect) cudaDriver() string {
	if d.cuda() == "13.0" {
		return "13000"
	}
	return "12080"
}

// timestamps: NCCL_DEBUG_TIMESTAMP_* exist from 2.26 (2.26.2 prints wrong sub-second digits).
func (d dialect) timestamps() bool { return d.ge(26, 0) }

// warnTimestamp: from 2.26 WARN lines carry "[%F %T] " by default.
func (d dialect) warnTimestamp() bool { return d.ge(26, 0) }

func (d dialect) bootstrapLine() string {
	if d.ge(24, 0) {
		return "Bootstrap: Using "
	}
	return "Bootstrap : Using "
}

// commInfo: "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d" (2.20+).
func (d dialect) commInfo() bool { return d.ge(20, 0) }

// lazyConnect: channels connect at the first collective (NCCL_RUNTIME_CONNECT, 2.22+);
// before, during init.
func (d dialect) lazyConnect() bool { return d.ge(22, 0) }

func (d dialect) p2pTransport() string {
	if d.ge(19, 0) {
		return "P2P/CUMEM/read"
	}
	return "P2P/IPC/read"
}

func (d dialect) connectedRings() string {
	if d.ge(24, 0) {
		return "Connected all rings, use ring PXN 0 GDR 1"
	}
	return "Connected all rings"
}

func (d dialect) channelsLine() string {
	if d.ge(20, 0) {
		return "16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer"
	}
	return "16 coll channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer"
}

// opCountAll: before 2.27 every launched plan advances opCount; from 2.27 only plans with
// proxy (network) work do.
func (d dialect) opCountAll() bool { return !d.ge(27, 0) }

// destroyVisible: 2.30.3 moved Destroy lines to the DESTROY subsystem. The simulated job
// asks for it (NCCL_DEBUG_SUBSYS=INIT,COLL,NET,ENV,DESTROY), as the reference recommends.
func (d dialect) destroyVisible() bool { return true }

func (d dialect) pluginLines() []string {
	switch {
	case d.minor <= 20:
		return []string{"NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory",
			"NET/Plugin : No plugin found, using internal implementation"}
	case d.minor <= 23:
		return []string{"NET/Plugin: Using internal network plugin."}
	case d.minor <= 27:
		return []string{"NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."}
	}
	return []string{"NET/Plugin: Could not find: libnccl-net.so"}
}

// ibDevice renders one element of the NET/IB device list.
func (d dialect) ibDevice(i int, dev string) string {
	if d.ge(30, 7) {
		return fmt.Sprintf(" [%d]%s:1:%d:/IB", i, dev, i)
	}
	return fmt.Sprintf(" [%d]%s:1/IB", i, dev)
}

// warnFile is the file:line (and from 2.30.7 the function) NCCL prints on an IB WARN.
func (d dialect) ibWarnSite(async bool) string {
	switch {
	case d.ge(30, 7) && async:
		return "transport/net_ib/init.cc:155 (ncclIbAsyncThreadMain)"
	case d.ge(30, 7):
		return "transport/net_ib/p2p.cc:688 (ncclIbLogCompletionWithError)"
	case d.ge(29, 0) && async:
		return "transport/net_ib/init.cc:151"
	case d.ge(29, 0):
		return "transport/net_ib/p2p.cc:676"
	case async:
		return "transport/net_ib.cc:110"
	}
	return "transport/net_ib.cc:2458"
}

// ibCompletion renders the IB completion-error WARN (§6.2) with RETRY_EXC_ERR on a Send.
func (d dialect) ibCompletion(peer, hca string) string {
	switch {
	case d.ge(29, 0):
		return "NET/IB: Got completion from peer " + peer + " with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  hca " + hca
	case d.ge(28, 7):
		return "NET/IB: Got completion from peer " + peer + " with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) reqSize=0 vendor_err=129 req_type=Send hca " + hca
	case d.ge(22, 0):
		return "NET/IB: Got completion from peer " + peer + " with status=12 opcode=0 len=0 vendor err 129 (Send) hca " + hca
	case d.ge(20, 0):
		return "NET/IB : Got completion from peer " + peer + " with status=12 opcode=0 len=0 vendor err 129 (Send)"
	}
	return "NET/IB : Got completion from peer " + peer + " with error 12, opcode 0, len 0, vendor err 129 (Send)"
}

// ibPortError renders the async "port error" event WARN (§6.3).
func (d dialect) ibPortError(hca string) string {
	switch {
	case d.ge(29, 0):
		return "NET/IB : " + hca + ":1 Got non-fatal async event: port error(10)"
	case d.ge(23, 0):
		return "NET/IB : " + hca + ":1 Got async error event: port error"
	case d.ge(20, 0):
		return "NET/IB : " + hca + ":1 Got async event : port error"
	}
	return "NET/IB : Got async event : port error"
}

// splitForm says how an ncclCommSplit child prints its Init lines.
type splitForm int

const (
	splitAsRoot       splitForm = iota // ≤2.20: the plain init form, with the child's own commId
	splitWithCommID                    // 2.21-2.22: parent, color, key and commId
	splitNoCount                       // 2.23: parent, color, key; no commId
	splitWithCount                     // 2.24-2.28: splitCount
	splitWithChildren                  // 2.29+: childCount
)

func (d dialect) split() splitForm {
	switch {
	case d.ge(29, 0):
		return splitWithChildren
	case d.ge(24, 0):
		return splitWithCount
	case d.ge(23, 0):
		return splitNoCount
	case d.ge(21, 0):
		return splitWithCommID
	}
	return splitAsRoot
}

// initAPI is the API name that starts an Init line ("" before 2.21).
func (d dialect) initAPI(isSplit bool) string {
	switch {
	case isSplit && d.ge(21, 0):
		return "ncclCommSplit "
	case d.ge(23, 0):
		return "ncclCommInitRankConfig " // PyTorch passes a config
	case d.ge(21, 0):
		return "ncclCommInitRank "
	}
	return ""
}

// rankPrefix: 2.29+ prints "[Rank %d] " before the non-split Init START.
func (d dialect) rankPrefix() bool { return d.ge(29, 0) }

func (d dialect) initTimings(api string, rank, nranks int) string {
	switch {
	case d.ge(23, 0):
		return fmt.Sprintf("Init timings - %s: rank %d nranks %d total 0.78 (kernels 0.42, alloc 0.01, bootstrap 0.31, allgathers 0.00, topo 0.03, graphs 0.00, connections 0.01, rest 0.00)",
			strings.TrimSpace(api), rank, nranks)
	case d.ge(22, 0):
		return fmt.Sprintf("Init timings: rank %d nranks %d total 0.78 (kernels 0.42, bootstrap 0.31, allgathers 0.00, topo 0.03, graphs 0.00, connections 0.01, rest 0.01)", rank, nranks)
	}
	return ""
}
