package detect

import "github.com/ncclwatch/watchdog/detect/blame"

// The waits-for graph (detect/blame) over the job's processes.
type (
	Wait      = blame.Wait[*Proc]
	WaitGraph = blame.Graph[*Proc]
)

// NewWaitGraph indexes edges by waiter and by awaited member; a cycle's members are ordered
// by rank.
func NewWaitGraph(edges []Wait) *WaitGraph {
	return blame.NewGraph(edges, func(a, b *Proc) bool { return a.Rank < b.Rank })
}
