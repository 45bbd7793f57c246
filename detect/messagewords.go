package detect

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/snapshot"
)

// whenWords says when in the process's life an event came (the table's {when}).
func whenWords(stage string, e snapshot.Event) string {
	words := map[string]string{"init": "during initialization", "ready": "after initialization",
		"first": "at its first operations", "run": "mid-run", "undated": "when, these lines do not show"}
	switch {
	case words[stage] != "":
		return words[stage]
	case strings.HasPrefix(e.Msg, "Test "):
		return "as nccl-tests reported it"
	}
	return "as PyTorch reported it"
}

// hcaEvent reports the kinds of event that are about an HCA port.
func hcaEvent(k snapshot.EventKind) bool {
	return k == snapshot.EventIBCompletion || k == snapshot.EventIBAsync || k == snapshot.EventIBSetup
}

// eventPort is the HCA port an event is about: the one it names ("mlx5_0:1"), or hcaPort's.
func eventPort(p *Proc, e snapshot.Event) string {
	if e.Port > 0 && e.Dev != "" {
		return e.Dev + ":" + strconv.Itoa(e.Port)
	}
	return hcaPort(p, e.Dev)
}

// hcaName is the HCA of a port ("mlx5_3" of "mlx5_3:1"), which keys a reporter's link fault:
// a line that names the HCA alone and one that names its port are about one fault.
func hcaName(port string) string {
	name, _, _ := strings.Cut(port, ":")
	return orUnknown(name)
}

// eventHCA names an event's HCA for a sentence: " HCA mlx5_3:1", or hcaWords'.
func eventHCA(p *Proc, e snapshot.Event) string {
	if e.Port > 0 && e.Dev != "" {
		return " HCA " + eventPort(p, e)
	}
	return hcaWords(p, e.Dev)
}

// hcaWords names the HCA of an error for a sentence: " HCA mlx5_3:1", or the process's
// devices when the line names none (NCCL before 2.22 does not); "" when nothing is known.
func hcaWords(p *Proc, dev string) string {
	if port := hcaPort(p, dev); port != "" {
		return " HCA " + port
	}
	var names []string
	for _, d := range p.NetDevs {
		name, _, _ := strings.Cut(d, "/")
		names = append(names, name)
	}
	if len(names) == 0 {
		return ""
	}
	return " on one of its HCAs (" + strings.Join(names, ", ") + "; this NCCL does not say which)"
}

// hcaPort is "mlx5_3:1" for an HCA the process uses, from its NET/IB device list; the
// process's only device when the line named none (NCCL before 2.22).
func hcaPort(p *Proc, dev string) string {
	for _, d := range p.NetDevs {
		name, _, _ := strings.Cut(d, "/")
		if dev != "" && (name == dev || strings.HasPrefix(name, dev+":")) {
			return name
		}
	}
	if dev == "" && len(p.NetDevs) == 1 && p.Network != "Socket" {
		name, _, _ := strings.Cut(p.NetDevs[0], "/")
		return name
	}
	return dev
}

// ncclResultWords is what an ncclResult_t means for whoever reads a post-mortem.
func ncclResultWords(code int) string {
	switch code {
	case snapshot.NCCLUnhandledCuda:
		return "a CUDA call failed inside NCCL"
	case snapshot.NCCLSystemError:
		return "a system call or library failed inside NCCL (sockets, shared memory, InfiniBand verbs)"
	case snapshot.NCCLInternalError:
		return "NCCL's internal check failed, most often because the ranks disagree (NCCL versions or settings) or a connection was corrupted"
	case snapshot.NCCLInvalidArg, snapshot.NCCLInvalidUsage:
		return "the application called NCCL wrongly"
	case snapshot.NCCLRemoteError:
		return "a remote process exited or the network failed: the first error is on another rank"
	}
	return "NCCL returned an error"
}

// ofiWords is "RC 113: no route to host, UNDELIVERABLE": libfabric's RC is an errno.
func ofiWords(e snapshot.Event) string {
	errnos := map[int]string{5: "I/O error", 104: "connection reset", 110: "timed out", 111: "connection refused",
		112: "host is down", 113: "no route to host", 125: "canceled"}
	var w []string
	if e.Code != 0 {
		s := fmt.Sprintf("RC %d", e.Code)
		if name, ok := errnos[max(e.Code, -e.Code)]; ok {
			s += ": " + name
		}
		w = append(w, s)
	}
	if e.Detail != "" {
		w = append(w, e.Detail)
	}
	return orUnknown(strings.Join(w, ", "))
}

// rankWords is "ranks 3 and 0".
func rankWords(ranks []int) string {
	switch len(ranks) {
	case 0:
		return "two ranks"
	case 1:
		return fmt.Sprintf("rank %d", ranks[0])
	}
	return fmt.Sprintf("ranks %d and %d", ranks[0], ranks[1])
}

func procOfRank(j *Job, r int) *Proc {
	for _, p := range j.Procs {
		if p.Rank == r {
			return p
		}
	}
	return nil
}

// socketTypeWords reads "4 != 3" (the type received, then the one expected) as "it got a
// NET/IB connection where it listens for NET/Socket".
func socketTypeWords(detail string) string {
	var got, want int
	if n, _ := fmt.Sscanf(detail, "%d != %d", &got, &want); n != 2 {
		return "wrong socket type " + orUnknown(detail)
	}
	return fmt.Sprintf("it got a %s connection where it listens for %s", snapshot.SocketTypeName(got), snapshot.SocketTypeName(want))
}

// strayInterface is an address of a process's own that no other host can reach, when NCCL
// listed it among several ("Using [0]eno1:10.0.0.5<0> [1]veth1a2b:fe80::1%veth1a2b<0>"):
// NCCL may hand it to its peers, whose connects then time out.
func strayInterface(p *Proc) string {
	if len(p.Addrs) < 2 {
		return ""
	}
	for _, a := range p.Addrs {
		if loopback(a + "<0>") {
			return a
		}
	}
	return ""
}

// nextNonBreadcrumb is the index of the first event from i in direction dir (1 or -1) that
// is not a breadcrumb, or -1.
func nextNonBreadcrumb(es []snapshot.Event, i, dir int) int {
	for k := i + dir; k >= 0 && k < len(es); k += dir {
		if es[k].Kind != snapshot.EventBreadcrumb {
			return k
		}
	}
	return -1
}
