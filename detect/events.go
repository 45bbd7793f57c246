package detect

import (
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// EventConfig bounds the age of the logged events and XIDs the rules read.
type EventConfig struct {
	// EventMaxAge ignores WARN events and XIDs older than this (live): the events a rank
	// keeps can be hours old in a quiet run, and an old error does not explain the job now.
	EventMaxAge time.Duration `yaml:"event_max_age"`
}

func recentEvent(j *Job, cfg EventConfig, t int64) bool {
	if j.Offline || t == 0 || cfg.EventMaxAge == 0 {
		return true
	}
	return j.Now.Sub(snapshot.Micros(t).Time()) <= cfg.EventMaxAge
}
