package gpu

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Probe opens the node's real NVML and writes n samples, every `every`, as JSON lines:
// one {"gpus":[...]} object per sample, then one {"unsupported":{...}} line naming what
// each GPU does not offer. It is `watchdog nvml-probe`, for checking a new GPU type or
// driver before trusting the sidecar's GPU data.
func Probe(ctx context.Context, w io.Writer, every time.Duration, n int) error {
	s, err := Open(ctx, Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	return probe(ctx, s, w, every, n)
}

func probe(ctx context.Context, s *Sampler, w io.Writer, every time.Duration, n int) error {
	if every <= 0 {
		every = time.Second
	}
	enc := json.NewEncoder(w)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var count int
	for i := 0; i < n; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		gpus, err := s.Sample(ctx)
		if err != nil {
			return fmt.Errorf("nvml probe: %w", err)
		}
		count = len(gpus)
		if err := enc.Encode(struct {
			T    snapshot.Micros `json:"t"`
			GPUs []snapshot.GPU  `json:"gpus"`
		}{snapshot.MicrosOf(time.Now()), gpus}); err != nil {
			return fmt.Errorf("nvml probe: write: %w", err)
		}
	}
	unsupported := map[string][]string{}
	for i := 0; i < count; i++ {
		unsupported[fmt.Sprint(i)] = s.Unsupported(i)
	}
	if err := enc.Encode(struct {
		Unsupported map[string][]string `json:"unsupported"`
	}{unsupported}); err != nil {
		return fmt.Errorf("nvml probe: write: %w", err)
	}
	return nil
}
