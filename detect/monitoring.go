package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// Monitoring reports the watchdog's own blindness: while the detector cannot reach etcd
// (j.EtcdDownSince), every communicator looks still and no job can be judged, so one
// incident says so instead of a page for every rank. Like every monitoring finding it is a
// warning for the operators (incident.MonitoringSeverity), never a page about a job.
func Monitoring(j *Job) []Finding {
	if j.EtcdDownSince.IsZero() {
		return nil
	}
	f := Finding{Kind: incident.KindMonitoring, Severity: incident.MonitoringSeverity, Key: incident.KeyEtcdUnreachable,
		Culprits: []incident.Culprit{}, FaultAt: j.EtcdDownSince}
	f.Summary = fmt.Sprintf("the detector cannot reach etcd since %s: jobs are not being judged", j.EtcdDownSince.UTC().Format(time.RFC3339))
	return []Finding{f}
}

// KeyEtcdSlow is the key of the incident that says etcd answers, but slowly.
const KeyEtcdSlow = "monitoring:etcd-slow"

// EtcdSlow reports an etcd that answers too slowly for the watchdog to see in time: the
// detector's round trips to it (its probes, reads and writes) had a p99 of p99, above
// threshold, since since. Snapshots reach the detector and incidents reach etcd that much
// later: the watchdog's trouble, not the jobs'.
func EtcdSlow(p99, threshold time.Duration, roundTrips int, window time.Duration, since time.Time) []Finding {
	f := Finding{Kind: incident.KindMonitoring, Severity: incident.MonitoringSeverity, Key: KeyEtcdSlow,
		Culprits: []incident.Culprit{}, FaultAt: since}
	f.Summary = fmt.Sprintf("the watchdog cannot see in time: etcd is slow, p99 %d ms (above %d ms since %s): node snapshots and incidents arrive late, and no rank is blamed for it",
		p99.Milliseconds(), threshold.Milliseconds(), since.UTC().Format(time.RFC3339))
	f.Evidence = []string{fmt.Sprintf("p99 of the detector's last %d round trips to etcd within %s (its probes, reads and writes): see ncclwatch_detector_etcd_request_seconds, and etcd's own disk and network metrics", roundTrips, window)}
	return []Finding{f}
}

// Undelivered is the dead-man's check as a finding: open incidents that no notifier
// delivered within the deadline, the oldest submitted at since. Paging is dead for them
// whatever each notifier's health says; the operators hear of it through whichever
// notifier still works, and through ncclwatch_alert_undelivered_incidents.
func Undelivered(ids []string, since time.Time) []Finding {
	if len(ids) == 0 {
		return nil
	}
	f := Finding{Kind: incident.KindMonitoring, Severity: incident.MonitoringSeverity, Key: incident.KeyAlertsUndelivered,
		Culprits: []incident.Culprit{}, FaultAt: since}
	shown := ids[:min(len(ids), 10)]
	f.Summary = fmt.Sprintf("%d open incident(s) reached no notifier since %s: paging is dead for them (%s)",
		len(ids), since.UTC().Format(time.RFC3339), strings.Join(shown, ", "))
	f.Evidence = []string{"no notifier delivered them within the delivery deadline: check ncclwatch_alert_notifier_built and the notifiers' failures"}
	return []Finding{f}
}

// LateThreshold is the lag of the watchdog's own inputs (a sidecar's sampling or
// publishing, the detector's evaluations) that is worth telling the operators: below it
// the widened windows (Job.InputLag) absorb it silently.
const LateThreshold = 5 * time.Second

// Late reports a part of the watchdog that runs late (starved of CPU, or slowed by etcd):
// who ("node n3's sidecar", "the detector") and by how much. The rules widen their windows
// by the lag instead of blaming ranks for it; this says that the watchdog judges late there.
func Late(key, who string, lag time.Duration, since time.Time) []Finding {
	if lag < LateThreshold {
		return nil
	}
	f := Finding{Kind: incident.KindMonitoring, Severity: incident.MonitoringSeverity, Key: "monitoring:late:" + key,
		Culprits: []incident.Culprit{}, FaultAt: since}
	f.Summary = fmt.Sprintf("%s runs %s late (starved of CPU, or slowed by etcd): hangs there are judged that much later, and no rank is blamed for it",
		who, lag.Round(100*time.Millisecond))
	return []Finding{f}
}

// EvaluateSafely is Evaluate for a process that judges many jobs: a rule that fails on one
// job's evidence (a bug) costs that job this evaluation, said as a monitoring finding with
// the failure, instead of ending the detector and every other job's watch with it.
func EvaluateSafely(j *Job, cfg Config, timing Timing) (res Result, failure error) {
	defer func() {
		if r := recover(); r != nil {
			failure = fmt.Errorf("a rule failed on job %s: %v", j.Name, r)
			f := Finding{Kind: incident.KindMonitoring, Severity: incident.MonitoringSeverity, Key: "monitoring:rule-failed:" + j.Name,
				Culprits: []incident.Culprit{}, FaultAt: j.Now}
			f.Summary = fmt.Sprintf("the watchdog could not judge job %s: one of its rules failed on this job's evidence (a bug in the watchdog; its log has the trace); the job is not judged while it fails", j.Name)
			res = Result{Findings: []Finding{f}, Notes: []string{failure.Error()}}
		}
	}()
	return Evaluate(j, cfg, timing), nil
}
