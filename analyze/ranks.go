package analyze

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/logparse"
)

// One resolver ties each process's pid and host to its rank in the job, from every source
// that says something of it, and names no rank where two sources disagree: it says so in
// the coverage instead. The sources, strongest first:
//
//	source                                   says                         strong when
//	"[rankN]:" or Open MPI on its own lines  the rank in the job          always
//	torchrun's failure record for its pid    the rank in the job          always
//	Init lines                               its rank in a communicator   the communicator spans the job
//	srun's label or a "[N] " tag             the launcher's task          never (a rank when the task is one process)
//	channel and [Proxy Service N] lines      its rank in a communicator   never (read without Init lines)
//
// Weak sources count only where no strong one speaks. A label shared by several processes
// of its file (torchrun under srun: one task per node) is the node's task, not a rank, and
// names none; PyTorch lines under it stay without a rank rather than take the label.

// procClaims is what a process's own lines claimed, and the file they were read from.
type procClaims struct {
	logparse.RankClaims
	file string
}

// rankVote is one source's word on a process's rank.
type rankVote struct {
	rank   int
	from   string
	strong bool
}

// rankResolver holds a job's processes by the labels of their files.
type rankResolver struct {
	claims map[*detect.Proc]procClaims
	// tasks: per file, the processes each label was on; labels: files whose labels are
	// ranks (every label on one process).
	tasks  map[string]map[int][]*detect.Proc
	labels map[string]bool
	// tasksNotRanks: files whose labels a strong source showed to be tasks, not ranks.
	tasksNotRanks map[string]bool
}

func newRankResolver(procs []*detect.Proc, claims map[*detect.Proc]procClaims) *rankResolver {
	rr := &rankResolver{claims: claims, tasks: map[string]map[int][]*detect.Proc{}, labels: map[string]bool{},
		tasksNotRanks: map[string]bool{}}
	for _, p := range procs {
		c, ok := claims[p]
		if !ok || c.Task < 0 && !c.TaskMixed {
			continue
		}
		if rr.tasks[c.file] == nil {
			rr.tasks[c.file] = map[int][]*detect.Proc{}
			rr.labels[c.file] = true
		}
		if c.TaskMixed {
			// Lines of several labels on one process: the labels are not its own.
			rr.labels[c.file] = false
			continue
		}
		rr.tasks[c.file][c.Task] = append(rr.tasks[c.file][c.Task], p)
	}
	for f, byTask := range rr.tasks {
		for _, ps := range byTask {
			if len(ps) > 1 {
				rr.labels[f] = false
			}
		}
	}
	return rr
}

// byTask is the one process of file that label was on, where the file's labels are ranks.
func (rr *rankResolver) byTask(file string, label int) *detect.Proc {
	if !rr.labels[file] {
		return nil
	}
	if ps := rr.tasks[file][label]; len(ps) == 1 {
		return ps[0]
	}
	return nil
}

// resolve sets each process's rank from the votes of its sources; records are torchrun's
// pid -> rank. It returns the sentences on processes it named no rank for, and on labels
// that are not ranks.
func (rr *rankResolver) resolve(procs []*detect.Proc, records map[int]int) []string {
	span := 0
	for _, p := range procs {
		if _, ok := rr.claims[p]; ok {
			span++
		}
	}
	var notes []string
	notLabels := map[string]string{}
	for _, p := range procs {
		c, ok := rr.claims[p]
		if !ok {
			continue
		}
		var votes []rankVote
		if c.Job >= 0 {
			votes = append(votes, rankVote{c.Job, `its lines' "[rankN]:" prefix`, true})
		}
		if r, ok := records[p.PID]; ok && p.PID > 0 {
			votes = append(votes, rankVote{r, "torchrun's failure record for its pid", true})
		}
		if c.Init >= 0 {
			votes = append(votes, rankVote{c.Init, fmt.Sprintf("its Init lines (rank %d of %d)", c.Init, c.InitRanks), c.InitRanks >= span})
		}
		if rr.labels[c.file] && c.Task >= 0 {
			votes = append(votes, rankVote{c.Task, fmt.Sprintf("its label %d: (srun --label)", c.Task), false})
		}
		if c.Own >= 0 {
			votes = append(votes, rankVote{c.Own, "its channel and proxy lines", false})
		}
		rank, conflict := decide(votes)
		p.Rank = rank
		if conflict != "" {
			notes = append(notes, fmt.Sprintf("%s: %s: no rank is named for it", p.Name(), conflict))
		}
		if c.JobMixed {
			notes = append(notes, fmt.Sprintf(`%s: its lines carry two "[rankN]:" prefixes (another process's lines among its own?): that prefix names no rank for it`, p.Name()))
		}
		if rank >= 0 && c.Task >= 0 && c.Task != rank && notLabels[c.file] == "" && strongRank(votes) {
			notLabels[c.file] = fmt.Sprintf("%s: srun's labels are its tasks, not the ranks (task %d runs rank %d, %s)", c.file, c.Task, rank, p.Name())
		}
	}
	files := make([]string, 0, len(notLabels))
	for f := range notLabels {
		files = append(files, f)
		rr.tasksNotRanks[f] = true
	}
	sort.Strings(files)
	for _, f := range files {
		notes = append(notes, notLabels[f])
	}
	return notes
}

// decide is the rank the votes agree on: the strong ones when any speaks, else the weak
// ones; -1 and the disagreement in words when they do not agree.
func decide(votes []rankVote) (int, string) {
	var strong, weak []rankVote
	for _, v := range votes {
		if v.strong {
			strong = append(strong, v)
		} else {
			weak = append(weak, v)
		}
	}
	use := strong
	if len(use) == 0 {
		use = weak
	}
	if len(use) == 0 {
		return -1, ""
	}
	for _, v := range use[1:] {
		if v.rank != use[0].rank {
			var says []string
			for _, v := range use {
				says = append(says, fmt.Sprintf("%s says rank %d", v.from, v.rank))
			}
			return -1, strings.Join(says, ", ")
		}
	}
	return use[0].rank, ""
}

func strongRank(votes []rankVote) bool {
	for _, v := range votes {
		if v.strong {
			return true
		}
	}
	return false
}

// labelIsRank reports whether a label of file names a rank: every label of the file is on
// one process, and no strong source said a task runs another rank (resolve runs first).
func (rr *rankResolver) labelIsRank(file string) bool {
	return rr.labels[file] && !rr.tasksNotRanks[file]
}

// eventProc is the process a PyTorch or launcher line under a label or "[defaultN]:" is
// about, nil when the label is not one process's: a task of several processes, a rank on a
// node of a job of several nodes.
func (rr *rankResolver) eventProc(te torchEvent, procs []*detect.Proc) *detect.Proc {
	if te.task >= 0 {
		if p := rr.byTask(te.file, te.task); p != nil {
			return p
		}
	}
	if te.local >= 0 {
		hosts := map[string]bool{}
		var only *detect.Proc
		n := 0
		for _, p := range procs {
			if p.Host != "?" {
				hosts[p.Host] = true
			}
			if p.LocalRank == te.local || (p.LocalRank < 0 && p.Rank == te.local) {
				only, n = p, n+1
			}
		}
		if len(hosts) <= 1 && n == 1 {
			// One node: the rank on the node is the rank in the job.
			return only
		}
	}
	return nil
}
