// Package frdump reads PyTorch Flight Recorder dumps: the pickle that
// TORCH_NCCL_DUMP_ON_TIMEOUT writes to <TORCH_FR_DUMP_TEMP_FILE><rank> (torch's own pickler,
// protocol 2) and the JSON form (_dump_nccl_trace_json, the fr_trace_json handler). It
// decodes pickles itself and builds plain data only (dicts, lists, tuples, strings, bytes,
// numbers, booleans, None): an opcode that would import, call or build an object is refused
// with its name and offset, nothing is ever executed, and what it builds is bounded. A dump
// becomes a snapshot.Process whose process groups are Comms (see snapshot/fr.go), so the
// detector takes it like a process read from a log.
package frdump
