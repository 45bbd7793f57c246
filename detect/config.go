package detect

import "time"

// Config holds every rule's settings. Each rule's own struct sits in the rule's file and is
// embedded inline, so the YAML keys stay the flat names the detector's config file and
// docs/configuration.md use (rules.hang_floor, not rules.hang.floor).
type Config struct {
	HangConfig       `yaml:",inline"`
	CompletionConfig `yaml:",inline"`
	SlowdownConfig   `yaml:",inline"`
	LinkConfig       `yaml:",inline"`
	EventConfig      `yaml:",inline"`
	LostConfig       `yaml:",inline"`
	KnowledgeConfig  `yaml:",inline"`
	RASConfig        `yaml:",inline"`
	TorchConfig      `yaml:",inline"`
	TeardownConfig   `yaml:",inline"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		HangConfig:       HangConfig{HangFloor: 10 * time.Second, HangK: 4, PageAfter: 30 * time.Second, PauseK: 3, AbandonedAfter: 2 * time.Second},
		CompletionConfig: CompletionConfig{CompletionFloor: 2 * time.Second, CompletionK: 10},
		SlowdownConfig: SlowdownConfig{SlowdownShare: 0.10, SlowdownSteps: 20, SlowdownWarmupSteps: 3, MeasuredMinOps: 8,
			SlowLinkFactor: 3, SlowLinkMinSteps: 32, CPUStarvedPct: 20},
		LinkConfig:      LinkConfig{XmitWaitPerSecond: 1e6},
		EventConfig:     EventConfig{EventMaxAge: 10 * time.Minute},
		LostConfig:      LostConfig{MassLossNodes: 3, MassLossFraction: 0.25, MassLossWindow: 15 * time.Second},
		KnowledgeConfig: KnowledgeConfig{PeerReporters: 2, MaxCulprits: 8, Quoted: 8},
		RASConfig:       RASConfig{RASMinGap: 2},
		TorchConfig:     TorchConfig{TorchQuoted: 8},
		// Half the ranks within 5 s: a killed job's ranks die within a second or two; 5 s
		// leaves room for the sidecars' liveness checks (250 ms) and a launcher's staggered kill.
		TeardownConfig: TeardownConfig{TeardownWindow: 5 * time.Second, TeardownFraction: 0.5},
	}
}
