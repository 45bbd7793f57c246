package detect

import "github.com/ncclwatch/watchdog/detect/blame"

// The waits-for graph (detect/blame) over the job's processes.
type (
	WaitClass = blame.WaitClass
	WaitSeen  = blame.WaitSeen
	Wait      = blame.Wait[*Proc]
	WaitGraph = blame.Graph[*Proc]
)

const (
	WaitHost      = blame.WaitHost
	WaitGPU       = blame.WaitGPU
	WaitLink      = blame.WaitLink
	SeenByPlugin  = blame.SeenByPlugin
	SeenBehind    = blame.SeenBehind
	SeenPastEnd   = blame.SeenPastEnd
	SeenP2P       = blame.SeenP2P
	SeenTransfers = blame.SeenTransfers
	SeenOrder     = blame.SeenOrder
)

// NewWaitGraph indexes edges by waiter and by awaited member; a cycle's members are ordered
// by rank.
func NewWaitGraph(edges []Wait) *WaitGraph {
	return blame.NewGraph(edges, func(a, b *Proc) bool { return a.Rank < b.Rank })
}
