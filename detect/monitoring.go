package detect

import (
	"fmt"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// Monitoring reports the watchdog's own blindness: while the detector cannot reach etcd
// (j.EtcdDownSince), every communicator looks still and no job can be judged, so one
// critical incident says so instead of a page for every rank.
func Monitoring(j *Job) []Finding {
	if j.EtcdDownSince.IsZero() {
		return nil
	}
	f := Finding{Kind: incident.KindMonitoring, Severity: incident.SeverityCritical, Key: incident.KeyEtcdUnreachable,
		Culprits: []incident.Culprit{}, FaultAt: j.EtcdDownSince}
	f.Summary = fmt.Sprintf("the detector cannot reach etcd since %s: jobs are not being judged", j.EtcdDownSince.UTC().Format(time.RFC3339))
	return []Finding{f}
}
