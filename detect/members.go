package detect

// Where a process sits in the job's communicators: the one it is furthest behind on.

// membership indexes each process's communicators and each communicator's two highest
// counts, so that judging every rank of a job torn down at once costs its communicators,
// not the whole job's, per rank.
type membership struct {
	of  map[*Proc][]seat
	top map[*Group][2]int // the members with the highest and second-highest counts
}

type seat struct {
	group *Group
	index int
}

func memberships(j *Job) membership {
	ix := membership{of: map[*Proc][]seat{}, top: map[*Group][2]int{}}
	for _, g := range j.Groups {
		top := [2]int{-1, -1}
		for i, m := range g.Members {
			ix.of[m.Proc] = append(ix.of[m.Proc], seat{g, i})
			switch {
			case top[0] < 0 || m.Comm.Count > g.Members[top[0]].Comm.Count:
				top = [2]int{i, top[0]}
			case top[1] < 0 || m.Comm.Count > g.Members[top[1]].Comm.Count:
				top[1] = i
			}
		}
		ix.top[g] = top
	}
	return ix
}

// mostBehind finds the communicator where p lags its peers the most.
func (ix membership) mostBehind(p *Proc) *behind {
	var best *behind
	gap := int64(0)
	for _, mo := range ix.of[p] {
		g, top := mo.group, ix.top[mo.group]
		lead := top[0]
		if lead == mo.index {
			lead = top[1]
		}
		if lead < 0 {
			continue
		}
		mine := g.Members[mo.index]
		if d := g.Members[lead].Comm.Count - mine.Comm.Count; d > gap {
			gap = d
			best = &behind{group: g, member: mine, leader: g.Members[lead]}
		}
	}
	return best
}

// firstGroup is the first communicator (the largest, in the Job's order) p belongs to.
func (ix membership) firstGroup(p *Proc) *Group {
	if of := ix.of[p]; len(of) > 0 {
		return of[0].group
	}
	return nil
}
