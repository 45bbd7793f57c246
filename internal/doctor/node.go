package doctor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/ncclwatch/watchdog/heartbeat/gpu"
	"github.com/ncclwatch/watchdog/heartbeat/ibport"
	"github.com/ncclwatch/watchdog/snapshot"
)

// NVML checks that the sidecar can read this machine's GPUs.
func NVML(ctx context.Context) []Result {
	s, err := gpu.Open(ctx, gpu.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fix := "run where the NVIDIA driver is mounted (Kubernetes: runtimeClassName nvidia; Slurm: the node itself)"
		if errors.Is(err, gpu.ErrNoNVML) && strings.Contains(err.Error(), "cgo") {
			fix = "use a build with cgo (the release image and `make build` have it)"
		}
		return []Result{problem("nvml", Warn, fmt.Sprintf("NVML unavailable: the sidecar will run without GPU state (%v)", err), fix)}
	}
	defer s.Close()
	gpus, err := s.Sample(ctx)
	if err != nil {
		return []Result{problem("nvml", Warn, fmt.Sprintf("NVML opened, but sampling failed: %v", err), "check the driver (nvidia-smi)")}
	}
	var names []string
	for _, g := range gpus {
		names = append(names, fmt.Sprintf("%d:%s", g.Index, g.Name))
	}
	return []Result{ok("nvml", "%d GPUs: %s", len(gpus), strings.Join(names, " "))}
}

// IB checks the InfiniBand ports the sidecar samples: each ACTIVE, with a rate.
func IB(ctx context.Context, ibRoot, netRoot string) []Result {
	ports, err := ibport.New(ibport.Options{IBRoot: ibRoot, NetRoot: netRoot, Logger: slog.New(slog.DiscardHandler)}).Sample(ctx)
	if err != nil {
		return []Result{problem("ib", Warn, fmt.Sprintf("reading ports: %v", err), "the sidecar reads /sys/class/infiniband and /sys/class/net: mount them (chart: sidecar.infinibandHostPath)")}
	}
	var out []Result
	ib := 0
	for _, p := range ports {
		if p.Kind != snapshot.PortIB {
			continue
		}
		ib++
		name := fmt.Sprintf("%s:%d", p.Device, p.Port)
		if !strings.Contains(strings.ToUpper(p.State), "ACTIVE") {
			out = append(out, problem("ib", Warn, fmt.Sprintf("IB port %s is %s (%s): NCCL cannot use it", name, p.State, p.PhysState),
				"check the cable and the switch port (ibstat); a port NCCL is not meant to use can be left out with NCCL_IB_HCA"))
			continue
		}
		out = append(out, ok("ib", "IB port %s ACTIVE at %g Gb/s (%s %s, %s)", name, p.RateGbps, p.Width, p.Speed, p.LinkLayer))
	}
	if ib == 0 {
		out = append(out, Result{Check: "ib", Level: Skip, Say: "no InfiniBand port under " + ibRoot + ": only net ports are sampled"})
	}
	return out
}
