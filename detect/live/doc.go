// Package live runs the detect rules on the jobs' live state in etcd. Every replica
// watches every key: node snapshots (kept as they came, in the inbox), incidents, and node
// leases that expire, and notes etcd outages. Replicas share the jobs: each owns some,
// through an owner key under its own lease, decodes only their snapshots into the state
// (per job, communicator and rank the latest state, plus a short history of ops and marks,
// since each snapshot carries only the newest few), hands each to detect.Evaluate every
// cycle, keeps its incidents through a detect.Lifecycle, stores them in etcd in
// transactions fenced on its ownership, and only then submits them to the Alerts of its
// term. The replica elected leader also judges the watchdog's own monitoring job. Any
// replica answers the API for every job. The rules themselves, live-only ones included,
// are in detect.
//
// detector.go holds the options, the watch and the evaluation; inbox.go the raw values
// and their decoding (job and node from the key, never the value); term.go a replica's
// lease, registration and election; ownership.go how replicas share the jobs; fence.go the
// fenced incident writes; state.go the decoded jobs; api.go the HTTP API; metrics.go the
// detector's Prometheus metrics; lag.go how late its evaluations run, etcdlatency.go how fast
// etcd answers it.
package live
