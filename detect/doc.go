// Package detect holds the rules that name the culprit of a hang, a collective or
// point-to-point mismatch, a crash, a straggler, a stuck collective, a degraded link, a GPU
// fault or a lost node, and say when the watchdog itself is blind; and the lifecycle that
// turns their findings into incidents, one per root cause.
//
// Beside comparing the ranks, rules read what NCCL prints when it fails and give the cause
// NCCL's maintainers give: IB completion errors by status (ib.go), socket connects and
// breaks (socket.go), CUDA failures (cuda.go), a setup NCCL cannot work with (setup.go),
// NCCL RAS reports (ras.go), PyTorch's watchdog lines alone (torch.go) and NCCL errors no
// other rule explains (ncclerror.go).
//
// Rules are pure functions of a Job on the Job's clock (Job.Now), so tests fake time by
// setting it. A Job is the ranks of one job as snapshots, live from etcd (detect/live) or
// rebuilt offline from log files (analyze), plus what the live detector saw besides them:
// lost nodes, lease losses, an etcd outage. One file per rule holds the rule and its
// settings; Config composes the settings; Evaluate runs every rule, then the merge steps of
// merge.go, which fold consequences into the finding of their root cause; Lifecycle keeps
// incidents across evaluations.
//
// The package reads the snapshot and incident contracts only, nothing of logparse,
// heartbeat or alert, so that the live and the offline feeds are judged alike.
package detect
