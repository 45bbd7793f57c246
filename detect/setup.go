package detect

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// SetupConfig sets how the job's setup is judged.
type SetupConfig struct {
	// SetupEvidence caps the lines quoted per finding.
	SetupEvidence int `yaml:"-"`
}

// Setup finds what in the job's setup keeps NCCL from working, with the fix NCCL's
// maintainers give: two ranks on one GPU, ranks running different NCCL versions (NCCL's own
// check, or the version lines), two processes given one rank, a /dev/shm too small or not
// shared, no usable socket interface, InfiniBand verbs that fail while connecting (rails, RoCE addressing, pinned
// memory, the peer-memory module), NVML that does not see the GPU CUDA gave NCCL, two machines
// under one host name.
func Setup(j *Job, cfg Config) []Finding {
	quote := max(cfg.SetupEvidence, 1)
	found := map[string]*Finding{}
	var order []string
	add := func(key string, p *Proc, e snapshot.Event, build func() *Finding) {
		f := found[key]
		if f == nil {
			f = build()
			f.Key = key
			if e.T != 0 {
				f.FaultAt = e.T.Time()
			}
			found[key] = f
			order = append(order, key)
		}
		if p != nil {
			f.culpritKeys = appendUnique(f.culpritKeys, p.Key())
		}
		if len(f.Evidence) < quote {
			f.addEvidence("%s: %s", p.Name(), e.Msg)
		}
	}
	for _, p := range j.Procs {
		for _, e := range p.Events {
			if !recentEvent(j, cfg.EventConfig, int64(e.T)) {
				continue
			}
			switch e.Kind {
			case snapshot.EventDuplicateGPU:
				add("config:gpu:"+p.Host+":"+e.Detail, p, e, func() *Finding {
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical}
					ranks := rankWords(e.Ranks)
					f.Culprits = rankCulprits(j, p, e.Ranks)
					on := ""
					if p.Host != "" && p.Host != "?" {
						on = " on " + p.Host
					}
					f.Summary = fmt.Sprintf("%s share one GPU (bus %s)%s: every rank needs its own GPU; set the device from the local rank before NCCL starts (torch.cuda.set_device(local_rank)) and check CUDA_VISIBLE_DEVICES and the launcher's GPUs per process",
						ranks, orUnknown(e.Detail), on)
					return f
				})
			case snapshot.EventVersionMismatch:
				add("config:version", p, e, func() *Finding {
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical}
					f.Culprits = rankCulprits(j, p, e.Ranks)
					f.Summary = fmt.Sprintf("NCCL found different NCCL versions among the ranks (%s: versions %s): every rank must load the same NCCL; check the containers and LD_LIBRARY_PATH of each node",
						rankWords(e.Ranks), orUnknown(e.Detail))
					return f
				})
			case snapshot.EventShmError:
				add("config:shm:"+p.Host, p, e, func() *Finding {
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical,
						Culprits: []incident.Culprit{p.Culprit()}}
					if e.Code == snapshot.ShmAttach {
						f.Summary = fmt.Sprintf("%s could not attach a shared-memory segment another rank of %s created: the ranks of one node do not share /dev/shm (separate containers or pods without a shared IPC namespace) or the segment was removed (systemd RemoveIPC); run the node's ranks in one IPC namespace, or NCCL_SHM_DISABLE=1", p.Name(), p.Host)
					} else {
						f.Summary = fmt.Sprintf("%s could not create a shared-memory segment in /dev/shm on %s: %s", p.Name(), p.Host, shmTooSmall)
					}
					return f
				})
			case snapshot.EventRankConflict:
				add("config:ranks", p, e, func() *Finding {
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical}
					if len(e.Ranks) > 0 {
						f.Culprits = rankCulprits(j, p, e.Ranks)
						f.Summary = fmt.Sprintf("rank %d checked in twice at NCCL's bootstrap root (a job of %d ranks): two processes were given rank %d; the launch started more processes than the job's size (a scheduler's tasks and the framework's own spawning both, a wrong --nproc_per_node or --ntasks-per-node) or another job uses the same master address and port",
							e.Ranks[0], e.Code, e.Ranks[0])
					} else {
						f.Culprits = []incident.Culprit{p.Culprit()}
						f.Summary = fmt.Sprintf("the processes that reached NCCL's bootstrap root on %s disagree on the job's size (%s): they were launched with different world sizes, or two jobs share the master address and port", orUnknown(p.Host), orUnknown(e.Detail))
					}
					return f
				})
			case snapshot.EventNoInterface:
				add("config:ifname:"+p.Host, p, e, func() *Finding {
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical,
						Culprits: []incident.Culprit{p.Culprit()}}
					on := "a host these lines do not name"
					if p.Host != "" && p.Host != "?" {
						on = p.Host
					}
					f.Summary = fmt.Sprintf("NCCL on %s found no usable network interface for its sockets: NCCL_SOCKET_IFNAME names an interface that host does not have (or excludes every one); set it to an interface all hosts share", on)
					return f
				})
			case snapshot.EventSignal:
				if !busErrorInNCCL(p, e) {
					continue
				}
				add("config:shm:"+p.Host, p, e, func() *Finding {
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{p.Culprit()}}
					where := "its NCCL lines are in the log"
					if e.Peer != "" {
						where = "its backtrace is in " + e.Peer
					}
					f.Summary = fmt.Sprintf("%s was killed by a bus error (SIGBUS) inside NCCL (%s): NCCL's shared-memory transport touched a /dev/shm page that could not be backed, which almost always means %s", p.Name(), where, shmTooSmall)
					return f
				})
			case snapshot.EventWarn:
				if e.Code != snapshot.WarnNVMLMissing {
					continue
				}
				add("config:nvml:"+p.Key(), p, e, func() *Finding {
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{p.Culprit()}}
					f.Summary = fmt.Sprintf("%s: NVML cannot find a GPU that NCCL looked up by its PCI bus id (%s), its own or another rank's of this host, so NCCL cannot detect the topology: NVML and CUDA see different GPUs here (a container that sees other GPUs than CUDA_VISIBLE_DEVICES says, NVML and CUDA numbering them differently, ranks of one node in separate containers that each see only their own GPU); run a node's ranks where all see the same GPUs (nvidia-smi inside the container lists what NVML sees)",
						p.Name(), orUnknown(e.Detail))
					return f
				})
			case snapshot.EventP2PError:
				add("config:p2p:"+p.Host, p, e, func() *Finding {
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{p.Culprit()}}
					f.Summary = fmt.Sprintf("%s could not share GPU memory with another process of %s through CUDA IPC (%s): GPU peer-to-peer between the GPUs of this host fails: the platform does not support it (the PCIe topology, a virtual machine, the IOMMU or PCIe ACS) or the processes run in containers that do not share an IPC namespace; NCCL_P2P_DISABLE=1 confirms it (NCCL then goes through shared memory)",
						p.Name(), orUnknown(p.Host), orUnknown(e.Detail))
					return f
				})
			case snapshot.EventSocketError:
				if e.Code != snapshot.SocketWrongType {
					continue
				}
				add("config:transport", p, e, func() *Finding {
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{p.Culprit()}}
					f.Summary = fmt.Sprintf("%s was reached by a rank of this job over another network transport than its own (%s): the nodes disagree on the network: InfiniBand works on one node and not on the other, NCCL_IB_DISABLE or NCCL_NET differ between them, or they load different NCCL versions; compare \"Using network\" on every node, then fix IB on the odd node or set NCCL_IB_DISABLE=1 on all",
						p.Name(), socketTypeWords(e.Detail))
					return f
				})
				// The proxy's failed Connect that follows is this mismatch's doing.
				for _, q := range p.Events {
					if q.Kind == snapshot.EventProxyError {
						found["config:transport"].addEvidence("then %s: %s", p.Name(), q.Msg)
						break
					}
				}
			case snapshot.EventIBSetup:
				if !e.Fatal {
					continue
				}
				verb := e.Detail
				add("config:ib:"+p.Host+":"+verb, p, e, func() *Finding {
					port := hcaPort(p, e.Dev)
					c := p.Culprit()
					c.Port = port
					f := &Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{c}}
					switch {
					case strings.Contains(verb, "modify_qp"):
						f.Kind = incident.KindLink
						f.Summary = fmt.Sprintf("%s could not connect its InfiniBand queue pair on %s (%s): the NICs cannot reach each other; on RoCE check NCCL_IB_GID_INDEX and the subnet, on rail-optimized fabrics set NCCL_CROSS_NIC=0, and test with ib_write_bw", p.Name(), orUnknown(port), orUnknown(e.Peer))
					case strings.Contains(verb, "reg_mr") || strings.Contains(verb, "reg_dmabuf"):
						f.Summary = fmt.Sprintf("%s could not register memory with the HCA %s: GPU memory needs the peer-memory module (nvidia-peermem) or DMA-BUF, and host memory an unlimited memlock limit (ulimit -l)", p.Name(), orUnknown(port))
					default:
						f.Summary = fmt.Sprintf("%s: the InfiniBand call %s failed on %s: check the HCA's state (ibstat), the memlock limit (ulimit -l) and the devices visible in the container", p.Name(), orUnknown(verb), orUnknown(port))
					}
					return f
				})
			}
		}
	}
	var out []Finding
	for _, k := range order {
		out = append(out, *found[k])
	}
	out = append(out, versionLines(j)...)
	return append(out, duplicateHostnames(j)...)
}

// versionLines compares the NCCL versions the processes printed: ranks of one job that
// load different NCCL libraries disagree on protocols and hang or fail in init.
func versionLines(j *Job) []Finding {
	byVersion := map[string][]*Proc{}
	for _, p := range j.Procs {
		if p.NCCL != "" {
			byVersion[p.NCCL] = append(byVersion[p.NCCL], p)
		}
	}
	if len(byVersion) < 2 {
		return nil
	}
	var versions []string
	for v := range byVersion {
		versions = append(versions, v)
	}
	// The most common version is the job's, the others are the odd ones out; between as
	// many, the lowest rank's (where the job was launched from).
	lowest := func(v string) int {
		lo := int(^uint(0) >> 1)
		for _, p := range byVersion[v] {
			if p.Rank >= 0 {
				lo = min(lo, p.Rank)
			}
		}
		return lo
	}
	sort.Slice(versions, func(a, b int) bool {
		if len(byVersion[versions[a]]) != len(byVersion[versions[b]]) {
			return len(byVersion[versions[a]]) > len(byVersion[versions[b]])
		}
		if la, lb := lowest(versions[a]), lowest(versions[b]); la != lb {
			return la < lb
		}
		return versions[a] < versions[b]
	})
	f := Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{}, Key: "config:versions"}
	var odd []string
	for _, v := range versions[1:] {
		for _, p := range byVersion[v] {
			if len(f.Culprits) < 16 {
				f.Culprits = append(f.Culprits, p.Culprit())
			}
			f.culpritKeys = append(f.culpritKeys, p.Key())
			odd = append(odd, fmt.Sprintf("%s runs %s", p.Name(), v))
		}
	}
	f.Summary = fmt.Sprintf("the ranks of this job load different NCCL versions (%d rank(s) run %s; %s): every rank must use the same NCCL, or they disagree on the protocol and fail or hang",
		len(byVersion[versions[0]]), versions[0], foldWords(odd, 4))
	return []Finding{f}
}

func foldWords(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
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

// rankCulprits names the ranks an event names: their processes when the job has them, else
// the rank on the reporter's host.
func rankCulprits(j *Job, reporter *Proc, ranks []int) []incident.Culprit {
	var out []incident.Culprit
	for _, r := range ranks {
		c := incident.Culprit{Rank: r, Host: reporter.Host}
		for _, p := range j.Procs {
			if p.Rank == r {
				c = p.Culprit()
				break
			}
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		out = append(out, reporter.Culprit())
	}
	return out
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

// shmTooSmall is the cause and fix of a /dev/shm that NCCL's shared-memory segments do not fit in.
const shmTooSmall = "/dev/shm is too small (a container gets 64 MB unless told otherwise); give it more (docker --shm-size, --ipc=host, a memory-backed emptyDir in Kubernetes) or set NCCL_SHM_DISABLE=1"

// busErrorInNCCL: a bus error (SIGBUS) a runtime reported in a process that runs NCCL: its
// backtrace shows an NCCL function, or the process's own NCCL lines are in the log.
func busErrorInNCCL(p *Proc, e snapshot.Event) bool {
	if e.Code != 7 && !strings.HasPrefix(e.Detail, "Bus error") {
		return false
	}
	return e.Peer != "" || p.Lines > 0
}
