//go:build !cgo

package gpu

import (
	"context"
	"fmt"
)

// Open reports NVML unavailable: go-nvml needs cgo, and this binary was built without it.
// The sidecar logs the error once and runs without GPU data.
func Open(ctx context.Context, opts Options) (*Sampler, error) {
	return nil, fmt.Errorf("%w: built without cgo (CGO_ENABLED=0)", ErrNoNVML)
}
