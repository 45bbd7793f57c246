// Package detect holds the rules that name the culprit of a hang, a mismatch, a crash, a
// straggler, a degraded link or a GPU fault. Rules are pure functions of a Job (the ranks of
// one job as snapshots, live from etcd or rebuilt offline from log files) and a clock.
package detect
