// Package heartbeat is the per-node sidecar: it follows every rank's NCCL log and the NCCL
// profiler plugin's region of every rank process, samples the node's GPUs, network ports,
// NCCL RAS and process liveness, and publishes one snapshot of the node to etcd, at most
// once a second and only when something changed. Log reading never
// waits on etcd, and no source failing (no GPU driver, etcd down, a malformed line) stops the
// others.
package heartbeat

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ncclwatch/watchdog/heartbeat/follow"
	"github.com/ncclwatch/watchdog/heartbeat/proc"
	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

// GPUSource samples the node's GPUs (heartbeat/gpu.Sampler).
type GPUSource interface {
	Sample(ctx context.Context) ([]snapshot.GPU, error)
}

// PortSource samples the node's network ports (heartbeat/ibport.Sampler).
type PortSource interface {
	Sample(ctx context.Context) ([]snapshot.Port, error)
}

// RASSource asks the local NCCL RAS service for a report (heartbeat/ras.Client).
type RASSource interface {
	Status(ctx context.Context) (*snapshot.RAS, error)
}

// Liveness watches rank processes by pid (heartbeat/proc.Watcher).
type Liveness interface {
	Watch(pid int) (proc.Info, error)
	// Info is what is known of a watched pid now (its environment may come after Watch).
	Info(pid int) (proc.Info, bool)
	Unwatch(pid int)
	Run(ctx context.Context, onExit func(pid int, at time.Time))
}

// Publisher writes the node snapshot (heartbeat/publish.Publisher). One that says how
// often it writes (Every) has its lateness measured.
type Publisher interface {
	Poke()
	Run(ctx context.Context, src func() ([]byte, error)) error
	Close(final []byte)
}

// Options configure a Sidecar. Nil sources are off.
type Options struct {
	Job  string
	Node string
	// LogPatterns are globs of NCCL_DEBUG_FILE logs; StdoutPatterns of launcher/PyTorch
	// output (optional).
	LogPatterns    []string
	StdoutPatterns []string
	// StateDir keeps read offsets and parser checkpoints across restarts ("" = none).
	StateDir string
	// ProfilerDirs are the folders where the profiler plugin writes its regions (none: the
	// plugin is not read). DefaultProfilerDirs gives the plugin's own defaults.
	ProfilerDirs []string
	// FRDumpDir is the folder PyTorch writes its Flight Recorder dumps to ("": not read);
	// see frdumps.go.
	FRDumpDir string
	// StateEvery is how often the read offsets are saved and the logs bounded (LogKeep)
	// (default 2 s).
	StateEvery time.Duration

	GPU      GPUSource
	Ports    PortSource
	RAS      RASSource
	Liveness Liveness
	// Publisher is nil for a sidecar that only serves its snapshot over HTTP.
	Publisher Publisher

	SampleEvery time.Duration // GPU, port and profiler region sampling (default 1 s)
	RASEvery    time.Duration // RAS polling (default 5 s)
	// RecentOps caps the ops per communicator a published snapshot carries: those since the
	// previous snapshot (default 32), at least MinRecentOps (default 4). RecentFor is how
	// long after its last op a communicator counts as moving (idle ones carry none).
	RecentOps    int
	MinRecentOps int
	RecentFor    time.Duration
	// KeepExited is how long an exited process stays in snapshots (default 10 min).
	KeepExited time.Duration
	// PollLogs makes the follower poll instead of using inotify (tests, odd filesystems).
	PollLogs bool
	// LogKeep bounds each NCCL log on disk: its header (up to its first per-op line) and
	// its last LogKeep bytes stay, what lies between is freed once read (0: logs are
	// never touched). See follow.Options.Keep.
	LogKeep int64
	// NoLogsAfter is how long after start the sidecar warns again, louder, when its log
	// patterns still match no file (default 5 min; it also says so at start).
	NoLogsAfter time.Duration

	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

func (o *Options) defaults() error {
	if err := snapshot.ValidJob(o.Job); err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	if o.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("sidecar: node name: %w", err)
		}
		o.Node = h
	}
	if len(o.Node) > snapshot.MaxNodeName || strings.Contains(o.Node, "/") {
		return fmt.Errorf("sidecar: node name %.40q...: at most %d bytes, no '/'", o.Node, snapshot.MaxNodeName)
	}
	if len(o.LogPatterns) == 0 {
		o.LogPatterns = []string{follow.DefaultPattern}
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = time.Second
	}
	if o.RASEvery <= 0 {
		o.RASEvery = 5 * time.Second
	}
	if o.RecentOps <= 0 {
		o.RecentOps = 32
	}
	if o.MinRecentOps <= 0 {
		o.MinRecentOps = 4
	}
	if o.RecentFor <= 0 {
		o.RecentFor = 10 * time.Second
	}
	if o.KeepExited <= 0 {
		o.KeepExited = 10 * time.Minute
	}
	if o.NoLogsAfter <= 0 {
		o.NoLogsAfter = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Sidecar is one node's watchdog agent.
type Sidecar struct {
	opts    Options
	started time.Time
	m       *metrics
	// How late the sampling loop and the publisher ran lately (lag.go): carried in the
	// snapshot (LagMS) and exported as metrics.
	sampleLag, publishLag lagMeter

	mu      sync.Mutex
	ranks   map[rankKey]*rankLog // by file identity
	regions *regionSet           // nil without ProfilerDirs; its own lock
	dumps   *dumpDir             // nil without FRDumpDir; its own lock
	torch   *torchLog
	gpus    []snapshot.GPU
	ports   []snapshot.Port
	ras     *snapshot.RAS
	seq     uint64

	encMu    sync.Mutex // guards the last encoded snapshot
	lastBody []byte
	lastOut  []byte

	follower       *follow.Follower
	stdoutFollower *follow.Follower
}

// New checks the options and prepares the sidecar; Run starts it.
func New(opts Options) (*Sidecar, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	s := &Sidecar{opts: opts, started: opts.Now(), ranks: map[rankKey]*rankLog{}, torch: newTorchLog()}
	s.m = newMetrics(s, opts.Registerer)
	if len(opts.ProfilerDirs) > 0 {
		s.regions = newRegionSet(opts.ProfilerDirs, opts.Logger.With("part", "profiler"))
	}
	if opts.FRDumpDir != "" {
		// A dump written shortly before the sidecar (re)started may still be this job's.
		s.dumps = newDumpDir(opts.FRDumpDir, s.started.Add(-opts.KeepExited), opts.KeepExited, opts.Logger.With("part", "fr-dumps"))
	}
	fopts := follow.Options{
		// Reading at most every 5 ms under a steady stream keeps each line's read time
		// within ~5 ms of its write while halving wake-ups, the follower's main cost.
		BatchInterval: 5 * time.Millisecond,
		Patterns:      opts.LogPatterns,
		Logger:        opts.Logger.With("part", "follow"),
		Now:           opts.Now,
		DisableWatch:  opts.PollLogs,
		Keep:          opts.LogKeep,
		StateEvery:    opts.StateEvery,
	}
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
			return nil, fmt.Errorf("sidecar state dir: %w", err)
		}
		// Offsets and the parser checkpoint of each file live in one file, written together.
		fopts.StatePath = filepath.Join(opts.StateDir, "follow.json")
	}
	f, err := follow.New(fopts, &logHandler{s: s})
	if err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	s.follower = f
	if len(opts.StdoutPatterns) > 0 {
		sf, err := follow.New(follow.Options{Patterns: opts.StdoutPatterns, Logger: opts.Logger.With("part", "follow-stdout"),
			Now: opts.Now, DisableWatch: opts.PollLogs}, &stdoutHandler{s: s})
		if err != nil {
			return nil, fmt.Errorf("sidecar stdout logs: %w", err)
		}
		s.stdoutFollower = sf
	}
	return s, nil
}

// Run works until ctx ends; then it publishes a last snapshot marked stopping and revokes
// its lease, so a clean stop is not taken for a lost node.
func (s *Sidecar) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	run := func(name string, fn func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ctx)
			s.opts.Logger.Debug("sidecar part stopped", "part", name)
		}()
	}
	run("follow", func(ctx context.Context) {
		if err := s.follower.Run(ctx); err != nil {
			s.opts.Logger.Error("log follower", "err", err)
		}
	})
	run("no-logs", s.noLogsLoop)
	if s.stdoutFollower != nil {
		run("follow-stdout", func(ctx context.Context) {
			if err := s.stdoutFollower.Run(ctx); err != nil {
				s.opts.Logger.Error("stdout follower", "err", err)
			}
		})
	}
	if s.opts.Liveness != nil {
		run("liveness", func(ctx context.Context) { s.opts.Liveness.Run(ctx, s.processExited) })
	}
	if s.opts.GPU != nil || s.opts.Ports != nil {
		run("sample", s.sampleLoop)
	}
	if s.opts.RAS != nil {
		run("ras", s.rasLoop)
	}
	if s.regions != nil {
		run("profiler", s.regionLoop)
	}
	if s.dumps != nil {
		// Dumps are rare (one per rank when a collective times out): a scan every few
		// seconds costs nothing and finds them long before anyone reads the page.
		run("fr-dumps", func(ctx context.Context) { s.dumps.run(ctx, 2*s.opts.SampleEvery, s.opts.Now, s.markChanged) })
	}
	if s.opts.Publisher != nil {
		run("publish", func(ctx context.Context) {
			if err := s.opts.Publisher.Run(ctx, s.encode); err != nil {
				s.opts.Logger.Error("publisher", "err", err)
			}
		})
	}
	<-ctx.Done()
	wg.Wait()
	if s.opts.Publisher != nil {
		final := s.Snapshot()
		final.Stopping = true
		b, err := snapshot.Encode(final)
		if err != nil {
			b = nil
		}
		s.opts.Publisher.Close(b)
	}
	return nil
}

// markChanged asks the publisher for a write (it never blocks, and the publisher writes at
// most once per interval).
func (s *Sidecar) markChanged() {
	if s.opts.Publisher != nil {
		s.opts.Publisher.Poke()
	}
}

func (s *Sidecar) sampleLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.SampleEvery)
	defer t.Stop()
	var gpuErrLogged, portErrLogged bool
	for {
		s.sampleLag.wake(time.Now(), s.opts.SampleEvery)
		if s.opts.GPU != nil {
			g, err := s.opts.GPU.Sample(ctx)
			switch {
			case err != nil && !gpuErrLogged:
				s.opts.Logger.Warn("GPU sample failed", "err", err)
				gpuErrLogged = true
			case err == nil:
				gpuErrLogged = false
				s.mu.Lock()
				s.gpus = g
				s.mu.Unlock()
				s.m.observeGPUs(g)
			}
		}
		if s.opts.Ports != nil {
			p, err := s.opts.Ports.Sample(ctx)
			switch {
			case err != nil && !portErrLogged:
				s.opts.Logger.Warn("port sample failed", "err", err)
				portErrLogged = true
			case err == nil:
				portErrLogged = false
				s.mu.Lock()
				s.ports = p
				s.mu.Unlock()
				s.m.observePorts(p)
			}
		}
		s.markChanged()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rasLoop asks RAS every RASEvery; while it fails (nothing listening: no NCCL process on
// the node, or RAS off) the pause doubles up to a minute and the snapshot has no report.
func (s *Sidecar) rasLoop(ctx context.Context) {
	backoff := s.opts.RASEvery
	for {
		r, err := s.opts.RAS.Status(ctx)
		wait := s.opts.RASEvery
		if err != nil {
			// No NCCL process listening is normal between jobs: stay quiet, back off.
			s.opts.Logger.Debug("RAS status", "err", err)
			backoff = min(2*backoff, 60*time.Second)
			wait = backoff
			r = nil
		} else {
			backoff = s.opts.RASEvery
		}
		s.mu.Lock()
		s.ras = r
		s.mu.Unlock()
		s.m.observeRAS(r)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// regionLoop reads the profiler regions every SampleEvery.
func (s *Sidecar) regionLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.SampleEvery)
	defer t.Stop()
	for {
		s.pollRegions()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// processExited is the liveness callback.
func (s *Sidecar) processExited(pid int, at time.Time) {
	s.regionExited(pid, at)
	s.mu.Lock()
	for _, r := range s.ranks {
		if r.pid == pid && r.exitedAt.IsZero() {
			r.exitedAt = at
		}
	}
	s.mu.Unlock()
	s.opts.Logger.Info("rank process exited", "pid", pid)
	s.markChanged()
}

// trackerOptions are the parser bounds of a live process.
func trackerOptions() logparse.TrackerOptions {
	return logparse.TrackerOptions{RingSize: 64, MaxComms: 1024, MaxEvents: 32}
}

// noLogsLoop warns when the log patterns match no file: at start (a sidecar that starts
// before the job has none yet, so that is a warning, not an error), and again after
// NoLogsAfter if still none matched, when it is most likely a wrong pattern or a job that
// writes NCCL_DEBUG_FILE elsewhere (or not at all).
func (s *Sidecar) noLogsLoop(ctx context.Context) {
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	// Give the follower its first scan.
	if !wait(2 * time.Second) {
		return
	}
	st := s.follower.Stats()
	if st.Files > 0 || st.Bytes > 0 {
		return
	}
	s.opts.Logger.Warn("no NCCL log matches the log patterns yet: waiting for the job to write them",
		"patterns", s.opts.LogPatterns, "dirs", patternDirState(s.opts.LogPatterns),
		"hint", "the job must set NCCL_DEBUG=INFO and NCCL_DEBUG_FILE to a path the patterns match, on a volume this sidecar sees")
	if !wait(s.opts.NoLogsAfter - 2*time.Second) {
		return
	}
	if st := s.follower.Stats(); st.Files > 0 || st.Bytes > 0 {
		return
	}
	s.opts.Logger.Error("still no NCCL log matches the log patterns: this node's ranks are not watched",
		"after", s.opts.NoLogsAfter, "patterns", s.opts.LogPatterns, "dirs", patternDirState(s.opts.LogPatterns),
		"hint", "check NCCL_DEBUG_FILE in the job (e.g. /var/log/nccl/nccl.%h.%p.log) against --logs, and that the folder is shared with the sidecar")
}

// patternDirState says, per folder of the patterns, whether it exists and what it holds:
// the first thing to check when nothing matches.
func patternDirState(patterns []string) []string {
	var out []string
	for _, p := range patterns {
		dir := filepath.Dir(p)
		entries, err := os.ReadDir(dir)
		switch {
		case err != nil:
			out = append(out, dir+": "+err.Error())
		default:
			out = append(out, fmt.Sprintf("%s: %d entries", dir, len(entries)))
		}
	}
	return out
}
