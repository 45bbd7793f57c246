package live

import (
	"errors"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// inbox holds what the watch delivered for every node of every job, as it came: each node
// key's latest value and the base it is compressed against (snapshot/wire.go). Decoding is
// most of a detector's CPU, so a replica decodes only the jobs it judges (State); the
// others' values wait here, a kilobyte a node, until the replica takes a job over, the
// API asks for it, or a node is lost.
type inbox struct {
	jobs map[string]map[string]*rawNode
}

type rawNode struct {
	value []byte         // the node key's latest value (nil: only a base so far)
	base  *snapshot.Base // the base the sidecar wrote under its BaseKey
}

func newInbox() *inbox { return &inbox{jobs: map[string]map[string]*rawNode{}} }

func (b *inbox) node(job, node string) *rawNode {
	j := b.jobs[job]
	if j == nil {
		j = map[string]*rawNode{}
		b.jobs[job] = j
	}
	r := j[node]
	if r == nil {
		r = &rawNode{}
		j[node] = r
	}
	return r
}

// remove forgets a node whose key was deleted, returning what it held.
func (b *inbox) remove(job, node string) *rawNode {
	j := b.jobs[job]
	r := j[node]
	delete(j, node)
	if len(j) == 0 {
		delete(b.jobs, job)
	}
	return r
}

// count is the number of nodes with a value.
func (b *inbox) count() int {
	n := 0
	for _, j := range b.jobs {
		for _, r := range j {
			if r.value != nil {
				n++
			}
		}
	}
	return n
}

// errKeyMismatch: a value names another job or node than its key (issue: a key under one
// job could plant a node in another). The key is what etcd's roles guard; the value is
// whatever the writer chose.
var errKeyMismatch = errors.New("snapshot names another job or node than its key")

// decode reads a node's value; the job and node come from its key, and a value that names
// others is refused (errKeyMismatch, with the value it named).
func (d *Detector) decode(job, node string, r *rawNode) (*snapshot.Node, error) {
	if r.value == nil {
		return nil, errors.New("no value yet")
	}
	n, err := d.wire.Decode(r.value, r.base)
	if err != nil {
		return nil, err
	}
	if n.Job != job || n.Node != node {
		return n, errKeyMismatch
	}
	return n, nil
}

// putDecoded puts a decoded node into the state, or counts why it could not be read.
// Call with d.mu held.
func (d *Detector) putDecoded(job, node string, n *snapshot.Node, err error, now time.Time) bool {
	switch {
	case errors.Is(err, errKeyMismatch):
		d.m.spoofed.Inc()
		d.opts.Logger.Warn("node snapshot refused: its value names another job or node than its key",
			"key", snapshot.NodeKey(job, node), "value_job", n.Job, "value_node", n.Node)
		return false
	case err != nil:
		d.m.badSnapshots.Inc()
		d.opts.Logger.Warn("bad node snapshot", "key", snapshot.NodeKey(job, node), "err", err)
		return false
	}
	if n.Time != 0 {
		d.m.watchLag.Observe(max(0, now.Sub(n.Time.Time()).Seconds()))
	}
	d.state.Put(n, now)
	return true
}

// change is one key's new value, or its deletion, from the watch or a full read.
type change struct {
	key   string
	value []byte
	del   bool
}

// ready is a change's value decoded ahead of applying it: a node of a job this replica
// owns, or a base (done: decoded).
type ready struct {
	node *snapshot.Node
	base *snapshot.Base
	err  error
	done bool
}

// applyChanges applies changes in order, their values decoded ahead in parallel.
func (d *Detector) applyChanges(chs []change) {
	rds := d.prepare(chs)
	now := d.opts.Now()
	d.mu.Lock()
	for i, c := range chs {
		d.applyChange(c, rds[i], now)
	}
	d.mu.Unlock()
	select {
	case d.changed <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// prepare decodes the values of changes outside the lock: bases, and the nodes of jobs
// this replica owns, those in parallel on every core. Decoding is most of a detector's
// CPU, and every node of a large job writes every second: 12,500 a second for 100k ranks,
// more than one core decodes. Each node is decoded with the base it will have once the
// changes before it apply.
func (d *Detector) prepare(chs []change) []ready {
	out := make([]ready, len(chs))
	type work struct {
		i         int
		job, node string
		value     []byte
		base      *snapshot.Base
	}
	var todo []work
	bases := map[[2]string]*snapshot.Base{}
	d.mu.Lock()
	for i, c := range chs {
		if c.del {
			continue
		}
		if job, node, ok := snapshot.ParseBaseKey(c.key); ok {
			// Rare (a base a minute per node) and small: decoded here, under the lock.
			b, err := d.wire.DecodeBase(c.value)
			out[i] = ready{base: b, err: err, done: true}
			if err == nil {
				bases[[2]string{job, node}] = b
			}
			continue
		}
		job, node, ok := snapshot.ParseNodeKey(c.key)
		if !ok || d.owned[job] == nil {
			continue
		}
		base := bases[[2]string{job, node}]
		if r := d.inbox.jobs[job][node]; base == nil && r != nil {
			base = r.base
		}
		todo = append(todo, work{i: i, job: job, node: node, value: c.value, base: base})
	}
	d.mu.Unlock()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1)) - 1; k < len(todo); k = int(next.Add(1)) - 1 {
				w := todo[k]
				n, err := d.decode(w.job, w.node, &rawNode{value: w.value, base: w.base})
				out[w.i] = ready{node: n, err: err, done: true}
			}
		}()
	}
	wg.Wait()
	return out
}

// rawOf copies a job's inbox entries (values are never changed in place, only replaced),
// so that they can be decoded without holding the detector's lock. Call with d.mu held.
func (d *Detector) rawOf(job string) map[string]rawNode {
	out := map[string]rawNode{}
	for node, r := range d.inbox.jobs[job] {
		if r.value != nil {
			out[node] = *r
		}
	}
	return out
}

// adopt decodes every node of a job this replica has just taken over, outside the lock
// (a job of 12,500 nodes takes seconds), and puts those the watch did not put a newer
// value of meanwhile (it decodes the job's values since it was marked owned); a node kept
// as lost whose key is back is put too.
func (d *Detector) adopt(job string) {
	d.mu.Lock()
	raws := d.rawOf(job)
	d.mu.Unlock()
	decoded := map[string]*snapshot.Node{}
	var dropped []string
	var firstErr error
	for node, r := range raws {
		n, err := d.decode(job, node, &r)
		switch {
		case err == nil:
			decoded[node] = n
			continue
		case errors.Is(err, errKeyMismatch):
			d.m.spoofed.Inc()
		default:
			d.m.badSnapshots.Inc()
		}
		dropped = append(dropped, node)
		if firstErr == nil {
			firstErr = err
		}
	}
	// Values already in etcd when the job is taken over are counted and said as those
	// the watch brings are (putDecoded), in one line.
	if len(dropped) > 0 {
		sort.Strings(dropped)
		d.opts.Logger.Warn("node snapshots dropped at takeover: undecodable or naming another job or node than their key",
			"job", job, "nodes", len(dropped), "first", dropped[0], "err", firstErr)
	}
	now := d.opts.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.owned[job] == nil {
		return // given up meanwhile
	}
	for node, n := range decoded {
		if cur := d.state.node(job, node); cur == nil || cur.snap == nil || cur.snap.Time < n.Time {
			d.state.Put(n, now)
		}
	}
}

// knownJobs lists every job with a node in etcd, or still in the state (lost nodes).
func (d *Detector) knownJobs() map[string]bool {
	out := map[string]bool{}
	for job, nodes := range d.inbox.jobs {
		for _, r := range nodes {
			if r.value != nil {
				out[job] = true
				break
			}
		}
	}
	for job := range d.state.jobs {
		out[job] = true
	}
	return out
}

// viewOf is a job's state decoded from raw inbox entries (rawOf), for the API of a replica
// that does not judge it: the nodes as they are now, without history or lost nodes.
func (d *Detector) viewOf(job string, raws map[string]rawNode, now time.Time) *State {
	s := NewState()
	for node, r := range raws {
		if n, err := d.decode(job, node, &r); err == nil {
			s.Put(n, now)
		}
	}
	return s
}
