package detect

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// KnowledgeConfig sets how the findings of the knowledge table are put together.
type KnowledgeConfig struct {
	// PeerReporters is how many hosts must report errors with one peer before the peer,
	// not the reporters' links, is the suspect (culprit "shared").
	PeerReporters int `yaml:"-"`
	// MaxCulprits bounds the culprits one finding names.
	MaxCulprits int `yaml:"-"`
	// Quoted caps the lines of the logs one finding quotes.
	Quoted int `yaml:"-"`
}

// msgEvent is one event a row of the table matched.
type msgEvent struct {
	p     *Proc
	e     snapshot.Event
	r     *knowledge.Row
	stage string
	// claimer is the event of the same process this one follows from (its row's then);
	// claims, whether others follow from this one.
	claimer *msgEvent
	claims  bool
	// key is the finding it belongs to; target, the finding it is quoted in instead (under).
	key, target string
	bl          *blamed
	values      map[string]string // its placeholders, once worked out
}

// blamed is whom an event's row blames.
type blamed struct {
	culprits []incident.Culprit
	own      []string // the culprit processes' keys
	involved bool     // the reporter is part of the finding (its key joins it)
	peerHost string   // the peer's host, when the peer is blamed for being shared
	viaShare bool
	key      string // {blame}
}

// messages is one evaluation's reading of the events.
type messages struct {
	j         *Job
	cfg       KnowledgeConfig
	hangFloor time.Duration // how long live an init must be stuck after an error trace
	book      *peerBook
	opsLogged bool
	// reporters are, per peer host, the hosts that report errors with it.
	reporters map[string]map[string]bool
}

// building is a finding being put together from its events.
type building struct {
	f         *Finding
	lead      *msgEvent
	reporters []*Proc
	peers     []string
	quoted    int
}

// Messages judges what the processes logged by the knowledge table (knowledge/messages.csv): each
// event takes the first row that matches it, and the events whose keys come out equal are
// one finding, worded by the earliest row's first event. What stays code is what every row
// shares: when an event came, whom a row blames, follow-up lines quoted as evidence, and
// consequences quoted in the finding they follow from.
func Messages(j *Job, cfg Config) []Finding {
	m := &messages{j: j, cfg: cfg.KnowledgeConfig, hangFloor: cfg.HangFloor}
	byProc := m.classify(cfg.EventConfig)
	if byProc == nil {
		return nil
	}
	m.claim(byProc)
	return m.assemble(byProc)
}

// classify matches each recent event of each process to its row; nil where none holds.
func (m *messages) classify(ec EventConfig) [][]*msgEvent {
	var out [][]*msgEvent // nil until an event matches: most evaluations have none
	for pi, p := range m.j.Procs {
		cause := false
		for i, e := range p.Events {
			if !recentEvent(m.j, ec, int64(e.T)) || echoed(m.j, p, e) {
				continue
			}
			ev := m.match(p, e)
			if ev == nil || e.Kind == snapshot.EventBreadcrumb && cause {
				// Breadcrumbs trace an error: after one that a row reads, they are its path.
				continue
			}
			cause = cause || e.Kind != snapshot.EventBreadcrumb && ev.r.Role != knowledge.RoleFallback
			if out == nil {
				out = make([][]*msgEvent, len(m.j.Procs))
			}
			if out[pi] == nil {
				out[pi] = make([]*msgEvent, len(p.Events))
			}
			out[pi][i] = ev
		}
	}
	return out
}

// match finds an event's row; nil for none, or a row that ignores it.
func (m *messages) match(p *Proc, e snapshot.Event) *msgEvent {
	if m.book == nil {
		m.book = newPeerBook(m.j)
		// A process that logged no op line had not reached its first op, when others did.
		for _, q := range m.j.Procs {
			for _, c := range q.Comms {
				m.opsLogged = m.opsLogged || c.Count > 0 || len(c.Recent) > 0
			}
		}
	}
	stage := m.stageOf(p, e)
	addr := func(a string) bool { return m.addrIs(a, p, e) }
	// Live, an init is stuck only once it has gone on for the hang window after the event:
	// NCCL logs the error trace of a transport it then does without (IB probed, sockets
	// used) while the communicators are still being set up, seconds before they finish.
	young := !m.j.Offline && e.T != 0 && m.j.Now.Sub(e.T.Time()) < m.hangFloor
	stuck := func() bool { return !young && stuckInInit(p, e) }
	for i := range knowledge.Messages {
		if r := &knowledge.Messages[i]; r.Matches(e, stage, addr, stuck) {
			if r.Ignore {
				return nil
			}
			return &msgEvent{p: p, e: e, r: r, stage: stage}
		}
	}
	return nil
}

// stageOf is when an event came, as far as the logs tell (the table's stage column): with
// no op line anywhere (COLL not logged, a posted excerpt), an event past init, or of a
// process with no communicator known, may have come at any time.
func (m *messages) stageOf(p *Proc, e snapshot.Event) string {
	s := e.Stage
	if p.Lines > 0 && !m.opsLogged && (s == snapshot.StageReady || len(p.Comms) == 0) {
		s = snapshot.StageUnknown
	}
	switch {
	case s != snapshot.StageUnknown:
		return string(s)
	case p.Lines > 0:
		return "undated"
	}
	return "quoted"
}

// addrIs checks the table's addr column.
func (m *messages) addrIs(a string, p *Proc, e snapshot.Event) bool {
	switch a {
	case "named":
		return peerName(e.Peer) != ""
	case "loopback":
		return e.Peer != "" && loopback(e.Peer)
	case "unlogged":
		return e.Peer != "" && len(m.book.procs[m.book.host(e.Peer)]) == 0
	case "stray":
		return strayInterface(p) != ""
	}
	return false
}

// claim marks the events that follow from another of their process (its row's then):
// first the neighbours a row names, then every later event of the kinds it names.
func (m *messages) claim(byProc [][]*msgEvent) {
	for pi, evs := range byProc {
		for i, ev := range evs {
			if ev == nil {
				continue
			}
			for _, f := range ev.r.Then {
				if f.Adj == 0 {
					continue
				}
				if k := nextNonBreadcrumb(m.j.Procs[pi].Events, i, f.Adj); k >= 0 && evs[k] != nil && evs[k].e.Kind == f.Kind && evs[k].claimer == nil {
					evs[k].claimer, ev.claims = ev, true
				}
			}
		}
		for i, ev := range evs {
			if ev == nil || ev.claimer != nil {
				continue
			}
			for _, q := range evs[i+1:] {
				if q != nil && q.claimer == nil && !q.claims && slices.Contains(ev.r.Then, knowledge.Follow{Kind: q.e.Kind}) {
					q.claimer, ev.claims = ev, true
				}
			}
		}
	}
}

// assemble decides, row by row in the table's order, each event's finding (or the earlier
// finding it is quoted in), then builds the findings in the order of the logs.
func (m *messages) assemble(byProc [][]*msgEvent) []Finding {
	byRow := make([][]*msgEvent, len(knowledge.Messages))
	m.reporters = map[string]map[string]bool{}
	for _, evs := range byProc {
		for _, ev := range evs {
			if ev == nil || ev.claimer != nil {
				continue
			}
			byRow[ev.r.Index] = append(byRow[ev.r.Index], ev)
			if c := ev.r.Culprit; c == "shared" || c == "remote" {
				if h := m.book.host(ev.e.Peer); h != "" {
					if m.reporters[h] == nil {
						m.reporters[h] = map[string]bool{}
					}
					m.reporters[h][ev.p.Host] = true
				}
			}
		}
	}
	leadRow := map[string]int{}
	var order []string
	for ri, evs := range byRow {
		r := &knowledge.Messages[ri]
		for _, ev := range evs {
			if r.Under != "" {
				prefix := r.Under.Render(m.value(ev))
				for _, k := range order {
					if leadRow[k] < ri && strings.HasPrefix(k, prefix) {
						ev.target = k
						break
					}
				}
				if ev.target != "" {
					continue
				}
			}
			ev.key = r.Key.Render(m.value(ev))
			if _, ok := leadRow[ev.key]; !ok {
				leadRow[ev.key] = ri
				order = append(order, ev.key)
			}
		}
	}
	found := map[string]*building{}
	for _, evs := range byProc {
		for _, ev := range evs {
			if ev == nil || ev.key == "" {
				continue
			}
			b := found[ev.key]
			if b == nil {
				b = &building{f: &Finding{Key: ev.key, Culprits: []incident.Culprit{}}}
				found[ev.key] = b
			}
			if b.lead == nil && ev.r.Index == leadRow[ev.key] {
				b.lead = ev
			}
			m.join(b, ev)
		}
	}
	for _, evs := range byProc {
		for _, ev := range evs {
			switch {
			case ev == nil:
			case ev.claimer != nil:
				if b := found[cmp.Or(ev.claimer.key, ev.claimer.target)]; b != nil {
					b.quote(m.cfg, "then %s: %s", ev.p.Name(), ev.e.Msg)
				}
			case ev.target != "":
				found[ev.target].quote(m.cfg, "then, as a consequence, %s: %s (%s)", ev.p.Name(), ev.e.Msg, ev.r.Summary.Render(m.value(ev)))
			}
		}
	}
	out := make([]Finding, 0, len(order))
	for _, k := range order {
		out = append(out, m.finish(found[k]))
	}
	return out
}

// join adds an event to its finding: its culprits, its time, its line.
func (m *messages) join(b *building, ev *msgEvent) {
	f, bl := b.f, m.blame(ev)
	for _, c := range bl.culprits {
		if len(f.Culprits) < max(m.cfg.MaxCulprits, 1) && !slices.Contains(f.Culprits, c) {
			f.Culprits = append(f.Culprits, c)
		}
	}
	for _, k := range bl.own {
		f.culpritKeys = appendUnique(f.culpritKeys, k)
	}
	if bl.involved {
		f.culpritKeys = appendUnique(f.culpritKeys, ev.p.Key())
	}
	if !slices.Contains(b.reporters, ev.p) {
		b.reporters = append(b.reporters, ev.p)
	}
	if ev.e.Peer != "" {
		b.peers = appendUnique(b.peers, m.book.describe(ev.e.Peer))
	}
	if t := ev.e.T; t != 0 && (f.FaultAt.IsZero() || t.Time().Before(f.FaultAt)) {
		f.FaultAt = t.Time()
	}
	hca := ""
	if hcaEvent(ev.e.Kind) {
		hca = eventHCA(ev.p, ev.e)
	}
	b.quote(m.cfg, "%s%s: %s", ev.p.Name(), hca, ev.e.Msg)
}

func (b *building) quote(cfg KnowledgeConfig, format string, args ...any) {
	if b.quoted < max(cfg.Quoted, 1) {
		b.quoted++
		b.f.addEvidence(format, args...)
	}
}

// finish words a finding by its lead row and event.
func (m *messages) finish(b *building) Finding {
	f, r := b.f, b.lead.r
	f.Kind, f.Severity, f.Cause, f.role, f.origin = r.Kind, r.Severity, r.Cause, r.Role, r.Origin
	v := m.value(b.lead)
	f.Summary = r.Summary.Render(v)
	if r.Advice != "" {
		f.Summary += ": " + r.Advice.Render(v)
	}
	// What the reporters saw of the culprit, not its own word: it folds into the root that
	// explains it (witnessesFoldIntoTheirRoot), and is a suspicion until confirmed.
	f.witness = r.Origin == knowledge.Witness
	if f.witness && !m.confirmed(b) {
		f.Summary += fmt.Sprintf("; only what %s saw of it: likely, not a confirmed death (the suspect's own log, a launcher record or a RAS report would confirm it)", b.reporters[0].Name())
	}
	if (r.Culprit == "reporter" || r.Culprit == "peers") && len(b.reporters) > 1 {
		f.Summary += fmt.Sprintf("; %d processes failed alike", len(b.reporters))
	}
	if r.Culprit == "peers" && len(b.peers) > 1 {
		f.Summary += fmt.Sprintf(", with %d peers in all", len(b.peers))
	}
	if bl := m.blame(b.lead); bl.viaShare {
		hosts := slices.Sorted(maps.Keys(m.reporters[bl.peerHost]))
		f.Summary += fmt.Sprintf("; %d hosts (%s) report it with %s, the one they share: look at its link and node first",
			len(hosts), strings.Join(hosts, ", "), m.book.describe(b.lead.e.Peer))
	}
	if len(f.Culprits) > 0 {
		for _, p := range b.reporters {
			if !slices.Contains(m.blame(b.lead).own, p.Key()) {
				f.Victims++
			}
		}
	}
	return *f
}

// blame is whom an event's row names as the culprit.
func (m *messages) blame(ev *msgEvent) *blamed {
	if ev.bl != nil {
		return ev.bl
	}
	p, e := ev.p, ev.e
	b := &blamed{involved: true}
	port := ""
	if hcaEvent(e.Kind) {
		port = eventPort(p, e)
	}
	reporter := func() {
		c := p.Culprit()
		c.Port = port
		b.culprits, b.own, b.key = []incident.Culprit{c}, []string{p.Key()}, p.Host+":"+hcaName(eventPort(p, e))
	}
	peer := func(host string) {
		name := host
		if name == "" {
			name = peerName(e.Peer)
		}
		b.peerHost, b.key = host, "peer:"+name
		if ps := m.book.procs[host]; host != "" && len(ps) == 1 {
			b.culprits, b.own = []incident.Culprit{ps[0].Culprit()}, []string{ps[0].Key()}
		} else if name != "" {
			b.culprits = []incident.Culprit{{Rank: -1, Host: name}}
		}
	}
	switch ev.r.Culprit {
	case "reporter":
		reporter()
	case "host":
		b.culprits, b.key = []incident.Culprit{{Rank: -1, Host: p.Host, Port: port}}, p.Host+":"+hcaName(port)
	case "peer":
		b.involved = false
		peer(m.book.host(e.Peer))
	case "peers":
		// The peers a set-up could not reach, by host; a loopback address names none.
		if h := m.book.host(e.Peer); h != "" {
			b.culprits = []incident.Culprit{{Rank: -1, Host: h}}
		} else if e.Peer != "" && !loopback(e.Peer) {
			b.culprits = []incident.Culprit{{Rank: -1, Host: peerName(e.Peer)}}
		}
	case "remote", "shared":
		h := m.book.host(e.Peer)
		if h != "" && h != p.Host && (ev.r.Culprit == "remote" || len(m.reporters[h]) >= max(m.cfg.PeerReporters, 2)) {
			peer(h)
			b.viaShare = ev.r.Culprit == "shared"
		} else {
			reporter()
		}
	case "ranks":
		// The ranks the line names: their processes when the job has them.
		for _, r := range e.Ranks {
			if q := procOfRank(m.j, r); q != nil {
				b.culprits, b.own = append(b.culprits, q.Culprit()), append(b.own, q.Key())
			} else {
				b.culprits = append(b.culprits, incident.Culprit{Rank: r, Host: p.Host})
			}
		}
		if len(b.culprits) == 0 {
			reporter()
		}
	case "rank", "coderank":
		b.involved = false
		r := e.Code
		if ev.r.Culprit == "rank" {
			r = e.Ranks[0]
		}
		switch q := procOfRank(m.j, r); {
		case q != nil:
			b.culprits, b.own = []incident.Culprit{q.Culprit()}, []string{q.Key()}
		case ev.r.Culprit == "rank":
			b.culprits = []incident.Culprit{{Rank: r}}
		default:
			b.culprits, b.own = []incident.Culprit{p.Culprit()}, []string{p.Key()}
		}
	}
	ev.bl = b
	return b
}

// stuckInInit: the event came during init, from a process none of whose communicators
// finished it (or that has none): an error it never got past.
func stuckInInit(p *Proc, e snapshot.Event) bool {
	if e.Stage != snapshot.StageInit {
		return false
	}
	for _, c := range p.Comms {
		if c.State != snapshot.CommInit {
			return false
		}
	}
	return true
}
