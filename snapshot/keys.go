package snapshot

import "strings"

// The etcd key layout, under one versioned prefix: what sidecars write, what the detector
// watches, where incidents and their delivery state are stored.
const (
	// Prefix holds every key of the watchdog.
	Prefix = "/ncclwatch/v1/"
	// JobsPrefix is watched by the detector: node snapshots and incidents of every job.
	JobsPrefix = Prefix + "jobs/"
	// LeaderKey is the election prefix of detector replicas.
	LeaderKey = Prefix + "leader"
	// ShardPrefix holds how detector replicas share the jobs: each live replica's key
	// (ReplicaKey) and each job's owner (OwnerKey), all under their replica's lease.
	ShardPrefix = Prefix + "shard/"
)

// ReplicaKey says that a detector replica is alive.
func ReplicaKey(id string) string { return ShardPrefix + "replicas/" + id }

// OwnerKey names the detector replica that judges a job.
func OwnerKey(job string) string { return ShardPrefix + "owners/" + job }

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
func IncidentKey(job, id string) string { return JobsPrefix + job + "/incidents/" + id }

// DeliveryKey stores which state of an incident a notifier has delivered.
func DeliveryKey(notifier, incidentID string) string {
	return Prefix + "delivery/" + notifier + "/" + incidentID
}

// ParseNodeKey splits a NodeKey into its job and node.
func ParseNodeKey(key string) (job, node string, ok bool) {
	return splitJobKey(key, "nodes")
}

// ParseBaseKey splits a BaseKey into its job and node.
func ParseBaseKey(key string) (job, node string, ok bool) {
	return splitJobKey(key, "base")
}

// ParseIncidentKey splits an IncidentKey into its job and incident id.
func ParseIncidentKey(key string) (job, id string, ok bool) {
	return splitJobKey(key, "incidents")
}

// splitJobKey splits JobsPrefix + "<job>/<kind>/<name>".
func splitJobKey(key, kind string) (job, name string, ok bool) {
	rest, found := strings.CutPrefix(key, JobsPrefix)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[1] != kind || parts[0] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[0], parts[2], true
}
