package logparse

// OpCode is an NCCL operation as printed in the per-collective line.
type OpCode uint8

const (
	OpUnknown OpCode = iota
	OpAllReduce
	OpAllGather
	OpReduceScatter
	OpBroadcast
	OpReduce
	OpAlltoAll
	OpGather
	OpScatter
	OpSend
	OpRecv
	OpPutSignal
	OpSignal
	OpWaitSignal
	numOps
)

var opNames = [numOps]string{
	OpUnknown:       "Unknown",
	OpAllReduce:     "AllReduce",
	OpAllGather:     "AllGather",
	OpReduceScatter: "ReduceScatter",
	OpBroadcast:     "Broadcast",
	OpReduce:        "Reduce",
	OpAlltoAll:      "AlltoAll",
	OpGather:        "Gather",
	OpScatter:       "Scatter",
	OpSend:          "Send",
	OpRecv:          "Recv",
	OpPutSignal:     "PutSignal",
	OpSignal:        "Signal",
	OpWaitSignal:    "WaitSignal",
}

func (o OpCode) String() string {
	if o < numOps {
		return opNames[o]
	}
	return "Unknown"
}

// Collective reports whether the op advances a communicator's collective sequence.
// Point-to-point and one-sided ops are counted per peer instead.
func (o OpCode) Collective() bool {
	switch o {
	case OpSend, OpRecv, OpPutSignal, OpSignal, OpWaitSignal, OpUnknown:
		return false
	}
	return true
}

// ParseOpName maps an op name to its code without allocating.
func ParseOpName(b []byte) OpCode {
	switch string(b) {
	case "AllReduce":
		return OpAllReduce
	case "AllGather":
		return OpAllGather
	case "ReduceScatter":
		return OpReduceScatter
	case "Broadcast":
		return OpBroadcast
	case "Reduce":
		return OpReduce
	case "AlltoAll":
		return OpAlltoAll
	case "Gather":
		return OpGather
	case "Scatter":
		return OpScatter
	case "Send":
		return OpSend
	case "Recv":
		return OpRecv
	case "PutSignal":
		return OpPutSignal
	case "Signal":
		return OpSignal
	case "WaitSignal":
		return OpWaitSignal
	}
	return OpUnknown
}

// Datatype is ncclDataType_t.
type Datatype int8

var datatypeNames = [...]string{"int8", "uint8", "int32", "uint32", "int64", "uint64",
	"float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"}

var datatypeSizes = [...]uint64{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

func (d Datatype) String() string {
	if d >= 0 && int(d) < len(datatypeNames) {
		return datatypeNames[d]
	}
	return "unknown"
}

// Size is the element size in bytes, 0 when unknown.
func (d Datatype) Size() uint64 {
	if d >= 0 && int(d) < len(datatypeSizes) {
		return datatypeSizes[d]
	}
	return 0
}

var redOpNames = [...]string{"sum", "prod", "max", "min", "avg"}

// RedOpName names ncclRedOp_t; values ≥ 5 are per-communicator user ops (PreMulSum).
func RedOpName(op int64) string {
	if op >= 0 && int(op) < len(redOpNames) {
		return redOpNames[op]
	}
	return "user"
}

// Reduces reports whether the op's reduction operator is meaningful.
func (o OpCode) Reduces() bool {
	return o == OpAllReduce || o == OpReduceScatter || o == OpReduce
}

// Rooted reports whether the op's root is meaningful.
func (o OpCode) Rooted() bool {
	return o == OpBroadcast || o == OpReduce || o == OpGather || o == OpScatter
}
