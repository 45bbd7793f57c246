package snapshot

import (
	"fmt"
	"regexp"
	"strings"
)

// The etcd key layout, under one versioned prefix, in two trees that no etcd permission
// spans by accident: JobsPrefix holds only what sidecars write (node keys and their
// bases), DetectorPrefix everything the detectors own (incidents, their page records,
// delivery state, the election, the replicas' liveness and the jobs' owners, the outage
// records, the incident key). A sidecar role is granted a range inside JobsPrefix and
// therefore reaches nothing the detectors decide with (docs/security.md).
const (
	// Prefix holds every key of the watchdog.
	Prefix = "/ncclwatch/v1/"
	// JobsPrefix holds the node snapshots of every job and their bases: nothing else.
	JobsPrefix = Prefix + "jobs/"
	// DetectorPrefix holds what only detector replicas may read or write.
	DetectorPrefix = Prefix + "detector/"
	// IncidentsPrefix holds the stored incidents of every job (IncidentKey).
	IncidentsPrefix = DetectorPrefix + "incidents/"
	// PagesPrefix holds, per incident that was ever open, the sealed record a new owner
	// restores it from when its incident key is missing or garbled (PageKey).
	PagesPrefix = DetectorPrefix + "pages/"
	// LeaderKey is the election prefix of detector replicas.
	LeaderKey = DetectorPrefix + "leader"
	// ShardPrefix holds how detector replicas share the jobs: each live replica's
	// heartbeat key (ReplicaKey) and each job's owner (OwnerKey).
	ShardPrefix = DetectorPrefix + "shard/"
	// OutagePrefix holds, per leading replica, the incident it pages if it loses etcd
	// (OutageKey): written before the outage, so that whoever leads after it resolves it.
	OutagePrefix = DetectorPrefix + "outages/"
)

// MaxJobName bounds a job name: it is a key segment and, for per-job sidecar roles, part
// of an etcd role and user name.
const MaxJobName = 128

// jobName is what a job name may be: letters, digits, _ . - (no '/', which would move a
// key into another job's tree), starting with a letter or digit.
var jobName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// ValidJob says why a job name cannot be used (nil: it can).
func ValidJob(job string) error {
	switch {
	case job == "":
		return fmt.Errorf("no job name")
	case len(job) > MaxJobName:
		return fmt.Errorf("job name of %d bytes: at most %d", len(job), MaxJobName)
	case !jobName.MatchString(job):
		return fmt.Errorf("job name %q: want letters, digits, _ . - (starting with a letter or digit)", job)
	}
	return nil
}

// MaxNodeName bounds a node name (a key segment).
const MaxNodeName = 253

// ReplicaKey is a detector replica's heartbeat: created under its lease, rewritten by the
// replica every third of its TTL. The other replicas judge it alive by the key's
// modification revision moving, not by the lease (any etcd user may keep any lease alive).
func ReplicaKey(id string) string { return ShardPrefix + "replicas/" + id }

// OwnerKey names the detector replica that judges a job.
func OwnerKey(job string) string { return ShardPrefix + "owners/" + job }

// OutageKey is the outage record of a leading replica's term (its lease, in hex).
func OutageKey(term string) string { return OutagePrefix + term }

// ParseReplicaKey returns the replica a ReplicaKey names.
func ParseReplicaKey(key string) (id string, ok bool) {
	id, ok = strings.CutPrefix(key, ShardPrefix+"replicas/")
	return id, ok && id != ""
}

// ParseOwnerKey returns the job an OwnerKey names.
func ParseOwnerKey(key string) (job string, ok bool) {
	job, ok = strings.CutPrefix(key, ShardPrefix+"owners/")
	return job, ok && job != "" && !strings.Contains(job, "/")
}

// NodeKey is where a node's sidecar publishes its snapshot.
func NodeKey(job, node string) string { return JobsPrefix + job + "/nodes/" + node }

// BaseKey is where a node's sidecar keeps the base its node key's values are compressed
// against (wire.go), under the same lease.
func BaseKey(job, node string) string { return JobsPrefix + job + "/base/" + node }

// IncidentKey stores one incident of a job.
func IncidentKey(job, id string) string { return IncidentsPrefix + job + "/" + id }

// PageKey stores the sealed page record of one incident of a job.
func PageKey(job, id string) string { return PagesPrefix + job + "/" + id }

// DeliveryKey stores which state of an incident a notifier has delivered.
func DeliveryKey(notifier, incidentID string) string {
	return DetectorPrefix + "delivery/" + notifier + "/" + incidentID
}

// ParseNodeKey splits a NodeKey into its job and node; a job or node name out of bounds
// is no node key.
func ParseNodeKey(key string) (job, node string, ok bool) {
	return splitJobKey(key, "nodes")
}

// ParseBaseKey splits a BaseKey into its job and node.
func ParseBaseKey(key string) (job, node string, ok bool) {
	return splitJobKey(key, "base")
}

// ParseIncidentKey splits an IncidentKey into its job and incident id.
func ParseIncidentKey(key string) (job, id string, ok bool) {
	return splitPair(key, IncidentsPrefix)
}

// ParsePageKey splits a PageKey into its job and incident id.
func ParsePageKey(key string) (job, id string, ok bool) {
	return splitPair(key, PagesPrefix)
}

func splitPair(key, prefix string) (job, id string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix)
	if !found {
		return "", "", false
	}
	job, id, found = strings.Cut(rest, "/")
	// The detectors' own job ("_ncclwatch") starts with '_', which no sidecar's may.
	if !found || ValidJob(strings.TrimPrefix(job, "_")) != nil || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return job, id, true
}

// splitJobKey splits JobsPrefix + "<job>/<kind>/<name>".
func splitJobKey(key, kind string) (job, name string, ok bool) {
	rest, found := strings.CutPrefix(key, JobsPrefix)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[1] != kind || ValidJob(parts[0]) != nil || parts[2] == "" || len(parts[2]) > MaxNodeName {
		return "", "", false
	}
	return parts[0], parts[2], true
}
