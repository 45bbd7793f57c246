// Package detect holds the rules that name the culprit of a hang, a collective or
// point-to-point mismatch, a crash, a straggler, a stuck collective, a degraded link, a GPU
// fault or a lost node, and say when the watchdog itself is blind; and the lifecycle that
// turns their findings into incidents, one per root cause.
//
// Beside comparing the ranks, the detector reads what NCCL, its network plugins, CUDA, the
// HCA and PyTorch print when they fail, and gives the cause their maintainers give. That
// knowledge is data: knowledge/messages.csv holds one row per meaning (the event kind and
// the conditions it matches on: status or code, message, source file, stage, the address it
// names; then the cause class, incident kind, severity, culprit, scope and the summary and
// advice), read once and checked by a test. messages.go is the one engine that applies it:
// the first row that matches an event wins, events whose keys come out equal are one
// finding, follow-up lines are quoted as its evidence. A new message is one row; a WARN no
// row knows still becomes a warning that quotes it, which any known cause outranks.
//
// Hangs are one engine (roots.go): edge producers (waits.go, inversion.go) turn the evidence
// into open waits of a waits-for graph (waitgraph.go), which is followed across
// communicators to its roots, each one finding with its cause class and the ranks that
// waited as its victims; a cycle is an order inversion.
//
// Rules are pure functions of a Job on the Job's clock (Job.Now), so tests fake time by
// setting it. A Job is the ranks of one job as snapshots, live from etcd (detect/live) or
// rebuilt offline from log files (analyze), plus what the live detector saw besides them:
// lost nodes, lease losses, an etcd outage. One file per rule holds the rule and its
// settings; Config composes the settings; Evaluate runs every rule, then the explains table
// (knowledge/explains.csv, one row per "a source explains a target when they share this",
// folded by merge.go), which folds consequences into the finding of their root cause;
// Lifecycle keeps incidents across evaluations.
//
// The package reads the snapshot and incident contracts only, nothing of logparse,
// heartbeat or alert, so that the live and the offline feeds are judged alike.
package detect
