// Package live runs the detect rules on the jobs' live state in etcd. It observes: it
// watches every node snapshot and keeps per job, communicator and rank the latest state
// (plus a short history of ops and marks, since each snapshot carries only the newest few),
// notes node leases that expire and etcd outages, and campaigns for leadership. The elected
// leader hands each job to detect.Evaluate every cycle, keeps the incidents through
// detect.Lifecycle, stores them in etcd and submits them to the Alerts of its term. The
// rules themselves, live-only ones included, are in detect.
//
// state.go holds the jobs' state, detector.go the watch, the election and the evaluation
// loop, api.go the HTTP API, metrics.go the detector's Prometheus metrics.
package live
