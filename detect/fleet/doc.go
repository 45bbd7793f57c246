// Package fleet joins the roots the detector names across jobs and time: which host, GPU,
// NIC or link made jobs wait, how much job time it cost, against how many job-hours ran on
// that node without blame. A bad part hurts every job the scheduler puts on it; judged one
// job at a time its roots look unrelated. The fleet ledger books each root per node part
// (ledger.go, record.go), kept in etcd, bounded and written only by the detector replica
// that owns the job (store.go: the same fence as the job's incidents). The leading replica
// judges the ledger (judge.go): a part that is the root in two or more jobs, or again and
// again in one job for hardware causes, far above its share of the fleet's exposure, opens
// a node incident with its evidence per job and the action to take (action.go: a
// Kubernetes node condition or taint, a Slurm drain), which resolves once the node has run
// clean for a configured exposure.
//
// The package reads the engine's output only (incident.Incident: kind, cause, culprits,
// episode), never its internals, so that the engine can change behind it.
package fleet
