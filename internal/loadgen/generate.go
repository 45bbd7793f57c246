package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/heartbeat/publish"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/loadgen/simjob"
	"github.com/ncclwatch/watchdog/snapshot"
)

// GenerateOptions configure the generator process (`watchdog loadgen --generate`).
type GenerateOptions struct {
	// Conn is how the simulated sidecars reach etcd (endpoints, TLS, a sidecar's user).
	Conn     etcdconn.Config
	Ranks    int
	Jobs     int
	PP       int
	Warmup   time.Duration
	StepTime time.Duration
	Clients  int
	Logger   *slog.Logger
}

// Report is one line of the generator's output: every second its running totals, and once
// the fault it injected.
type Report struct {
	At     time.Time `json:"at"`
	Writes int64     `json:"writes"` // etcd writes (a base and a value in one transaction: one)
	Bytes  int64     `json:"bytes"`  // bytes of values written, bases included
	Errors int64     `json:"errors"`
	Fault  *Fault    `json:"fault,omitempty"`
}

// Fault is the silent rank: its job, its rank, and when it last progressed.
type Fault struct {
	Job  string    `json:"job"`
	Rank int       `json:"rank"`
	At   time.Time `json:"at"`
}

// JobName names the j-th simulated job.
func JobName(j int) string { return fmt.Sprintf("load%d", j) }

// Generate publishes every simulated node of the jobs through the real publisher until ctx
// ends; after the warm-up one rank of the first job goes silent. It writes a Report line
// to out every second.
func Generate(ctx context.Context, o GenerateOptions, out io.Writer) error {
	if o.Jobs <= 0 {
		o.Jobs = 1
	}
	if o.Ranks <= 0 || o.Ranks%(8*o.Jobs) != 0 {
		return errors.New("loadgen: --ranks must be a positive multiple of 8 x --jobs")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	clients := make([]*clientv3.Client, max(o.Clients, 1))
	for i := range clients {
		c, err := etcdconn.New(o.Conn)
		if err != nil {
			return err
		}
		defer c.Close()
		clients[i] = c
	}
	nodesPerJob := o.Ranks / 8 / o.Jobs
	start := time.Now()
	jobs := make([]*simjob.Job, o.Jobs)
	for j := range jobs {
		culprit := -1
		if j == 0 {
			culprit = nodesPerJob*8/2 + 3
		}
		jobs[j] = simjob.New(JobName(j), nodesPerJob, o.PP, o.StepTime, start, culprit)
	}
	var errs atomic.Int64
	var wg sync.WaitGroup
	wire := &snapshot.Wire{} // shared: a few zstd coders for all the nodes
	var pubs []*publish.Publisher
	total := o.Ranks / 8
	for i := 0; i < total; i++ {
		job, n := jobs[i/nodesPerJob], i%nodesPerJob
		pub := assemble.Publisher(clients[i%len(clients)], job.Name, simjob.NodeName(n),
			assemble.PublishConfig{LeaseTTL: 10 * time.Second, Interval: time.Second, Wire: wire}, o.Logger, nil)
		pubs = append(pubs, pub)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the nodes over the second, as independent sidecars are.
			select {
			case <-time.After(time.Duration(i) * time.Second / time.Duration(total)):
			case <-ctx.Done():
				return
			}
			var sent simjob.Sent
			pub.Run(ctx, func() ([]byte, error) {
				sn, next := job.Node(n, time.Now(), sent)
				b, err := snapshot.Encode(sn)
				if err != nil {
					errs.Add(1)
					return nil, err
				}
				sent = next
				return b, nil
			})
		}()
	}
	defer wg.Wait()
	enc := json.NewEncoder(out)
	report := func(f *Fault) error {
		r := Report{At: time.Now(), Errors: errs.Load(), Fault: f}
		for _, p := range pubs {
			w, b := p.Stats()
			r.Writes, r.Bytes = r.Writes+w, r.Bytes+b
		}
		return enc.Encode(r)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	injectAt := time.After(o.Warmup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-injectAt:
			at := jobs[0].Inject(time.Now())
			if err := report(&Fault{Job: jobs[0].Name, Rank: jobs[0].Culprit, At: at}); err != nil {
				return err
			}
		case <-tick.C:
			if err := report(nil); err != nil {
				return err
			}
		}
	}
}
