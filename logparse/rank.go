package logparse

// The line types that carry the rank of the process that printed them, and where the rank is
// in each: the source of a process's rank when its log has no Init line (an excerpt, a log
// joined late). The rank is a communicator's; a process that prints ranks of two
// communicators (split groups) has no single one, and the tracker then names none.
//
//	KindChannel     "Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0": the sender's rank
//	                (the first) on [send] and on the P2P/SHM lines the sender prints; the
//	                receiver's (the second) on [receive].
//	KindProxyError  "[Proxy Service 93] Failed to execute operation Connect from rank 93":
//	                the number after "Proxy Service" (NCCL prints comm->rank there; "from rank"
//	                is the local rank that asked, which with PXN may be another process).
//
// The launcher's "[rankN]:" and Init's "rank N nranks M" are read where those lines are.

// OwnRank returns the rank of the process that printed l, from a line type that carries it
// (the table above); -1 for any other line.
func OwnRank(l *Line) int {
	switch l.Kind {
	case KindChannel:
		if l.Channel.Recv {
			return l.Channel.To
		}
		return l.Channel.From
	case KindProxyError:
		return l.Rank
	}
	return -1
}
