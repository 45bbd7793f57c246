package frdump

import (
	"strconv"
	"strings"
)

// opBase is a profiling name without its backend: "nccl:send 0->1" → "send 0->1".
func opBase(name string) string {
	if _, rest, ok := strings.Cut(name, ":"); ok {
		return rest
	}
	return name
}

// How a PyTorch op's element count becomes NCCL's count.
const (
	countIn  = iota // numel of the inputs (all_reduce, broadcast, all_gather: per rank)
	countOut        // numel of the outputs (reduce_scatter: what each rank receives)
	countPer        // numel of the inputs over the group's size (all_to_all: per peer)
)

type opInfo struct {
	nccl  string
	count int
}

// ops maps PyTorch's op names (profiling_name without "nccl:") to NCCL's names as NCCL's
// per-op lines print them, and to how NCCL's count is reckoned.
var ops = map[string]opInfo{
	"all_reduce": {"AllReduce", countIn}, "allreduce": {"AllReduce", countIn},
	"allreduce_coalesced": {"AllReduce", countIn}, "all_reduce_barrier": {"AllReduce", countIn},
	"barrier":   {"AllReduce", countIn},
	"broadcast": {"Broadcast", countIn}, "_broadcast_oop": {"Broadcast", countIn},
	"reduce": {"Reduce", countIn}, "_reduce_oop": {"Reduce", countIn},
	"all_gather": {"AllGather", countIn}, "_all_gather_base": {"AllGather", countIn},
	"_allgather_base": {"AllGather", countIn}, "all_gather_into_tensor_coalesced": {"AllGather", countIn},
	"ALLGATHER_coalesced": {"AllGather", countIn}, "allgather_coalesced": {"AllGather", countIn},
	"all_gather_single": {"AllGather", countIn}, "all_gather_v": {"AllGather", countIn},
	"reduce_scatter": {"ReduceScatter", countOut}, "_reduce_scatter_base": {"ReduceScatter", countOut},
	"reduce_scatter_tensor_coalesced": {"ReduceScatter", countOut},
	"REDUCE_SCATTER_coalesced":        {"ReduceScatter", countOut}, "reduce_scatter_single": {"ReduceScatter", countOut},
	"reduce_scatter_v": {"ReduceScatter", countOut},
	"all_to_all":       {"AlltoAll", countPer}, "all_to_all_single": {"AlltoAll", countPer},
	"alltoall": {"AlltoAll", countPer}, "alltoall_base": {"AlltoAll", countPer},
	"all_to_all_v_single": {"AlltoAll", countPer},
	"gather":              {"Gather", countIn}, "scatter": {"Scatter", countOut},
	"send": {"Send", countIn}, "recv": {"Recv", countOut},
	"coalesced": {"Coalesced", countIn},
}

// opOf is the NCCL name of an entry's op and its peer's group rank for a send or receive
// (-1 when none or not printed): "send 1->2" is a send from group rank 1 to 2, "recv 3<-0"
// a receive by 3 from 0. A name it does not know keeps PyTorch's spelling, without the
// characters the compact op encoding reserves.
func opOf(name string) (op string, peer int, info opInfo) {
	base := opBase(name)
	word, meta, _ := strings.Cut(base, " ")
	peer = -1
	info, ok := ops[word]
	if !ok {
		info = opInfo{nccl: strings.Map(func(r rune) rune {
			if r == ',' || r == ';' || r == '"' || r == '\\' || r == ' ' {
				return '_'
			}
			return r
		}, cut(word, 40)), count: countIn}
	}
	switch word {
	case "send":
		if _, dst, ok := strings.Cut(meta, "->"); ok {
			peer = atoiOr(dst, -1)
		}
	case "recv":
		if _, src, ok := strings.Cut(meta, "<-"); ok {
			peer = atoiOr(src, -1)
		}
	}
	return info.nccl, peer, info
}

func atoiOr(s string, def int) int {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return def
	}
	return v
}

// dtypes maps c10's ScalarType names (c10::toString) to NCCL's, as ncclDataType_t names
// print in the snapshot; complex types travel as pairs of their real type (PyTorch passes
// view_as_real), so their count doubles.
var dtypes = map[string]struct {
	nccl  string
	scale uint64
}{
	"Float": {"float32", 1}, "Double": {"float64", 1}, "Half": {"float16", 1}, "BFloat16": {"bfloat16", 1},
	"Int": {"int32", 1}, "Long": {"int64", 1}, "Char": {"int8", 1}, "Byte": {"uint8", 1},
	"Bool": {"uint8", 1}, "UInt32": {"uint32", 1}, "UInt64": {"uint64", 1},
	"Float8_e4m3fn": {"float8e4m3", 1}, "Float8_e5m2": {"float8e5m2", 1},
	"Float8_e4m3fnuz": {"float8e4m3", 1}, "Float8_e5m2fnuz": {"float8e5m2", 1},
	"ComplexFloat": {"float32", 2}, "ComplexDouble": {"float64", 2}, "ComplexHalf": {"float16", 2},
}

// dtypeOf is NCCL's name for a ScalarType and how many NCCL elements one of it is; a type
// NCCL has no name for keeps PyTorch's, lower case ("short").
func dtypeOf(t string) (string, uint64) {
	if d, ok := dtypes[t]; ok {
		return d.nccl, d.scale
	}
	if t == "" {
		return "unknown", 1
	}
	return strings.ToLower(strings.Map(func(r rune) rune {
		if r == ',' || r == ';' || r == '"' || r == '\\' {
			return '_'
		}
		return r
	}, cut(t, 24))), 1
}

// numel sums the elements of a list of tensor sizes.
func numel(sizes [][]int64) uint64 {
	var total uint64
	for _, dims := range sizes {
		n := uint64(1)
		for _, d := range dims {
			if d < 0 {
				return 0
			}
			n *= uint64(d)
		}
		total += n
	}
	return total
}

// ncclCount is the element count NCCL's per-op line would print for an entry: the inputs'
// (per rank for all_gather), the outputs' for reduce_scatter and receives, the inputs' over
// the group's size for all_to_all; times 2 for complex types.
func ncclCount(e *Entry, info opInfo, groupSize int) (uint64, string) {
	in, out := numel(e.InSizes), numel(e.OutSizes)
	var n uint64
	dt := ""
	switch info.count {
	case countOut:
		n = out
		if len(e.OutDtypes) > 0 {
			dt = e.OutDtypes[0]
		}
		if len(e.OutSizes) == 0 {
			n = in
		}
	case countPer:
		n = in
		if groupSize > 0 {
			n /= uint64(groupSize)
		}
	default:
		n = in
	}
	if dt == "" && len(e.InDtypes) > 0 {
		dt = e.InDtypes[0]
	}
	if dt == "" && len(e.OutDtypes) > 0 {
		dt = e.OutDtypes[0]
	}
	name, scale := dtypeOf(dt)
	return n * scale, name
}
