package live

import (
	"errors"
	"fmt"
	"time"
)

// Ready says whether this replica can serve, and if not why (/readyz): it must have read
// etcd once since it started (until then its view of the jobs is empty, not healthy), reach
// it now, and pass Options.Ready (the alert notifiers it was configured with are built).
func (d *Detector) Ready() error {
	d.mu.Lock()
	reached, down := d.reached, d.etcdDown
	d.mu.Unlock()
	var errs []error
	switch {
	case !reached:
		errs = append(errs, errors.New("etcd not read yet since start"))
	case !down.IsZero():
		errs = append(errs, fmt.Errorf("etcd unreachable since %s", down.UTC().Format(time.RFC3339)))
	}
	if d.opts.Ready != nil {
		if err := d.opts.Ready(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// EtcdDownSince is when this replica lost etcd (zero: it reaches it, or never did).
func (d *Detector) EtcdDownSince() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.etcdDown
}

// Leading says whether this replica leads now.
func (d *Detector) Leading() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leader
}

// ID is this replica's name in the election.
func (d *Detector) ID() string { return d.opts.ID }
