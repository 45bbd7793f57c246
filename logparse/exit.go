package logparse

import (
	"bytes"
	"strconv"

	"github.com/ncclwatch/watchdog/snapshot"
)

// The readers of PyTorch's and torchrun's words on why a rank stopped: its desync check
// (TORCH_DISTRIBUTED_DEBUG=DETAIL, ProcessGroupWrapper.cpp), its monitored barrier
// (ProcessGroupGloo.cpp), the exception that ended a Python traceback, and torchrun's failure
// record (torch/distributed/elastic/multiprocessing/errors).

// parseDesync reads "Detected mismatch between collectives on ranks. Rank 1 is running
// collective: CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE, TensorShape=[20, 10],
// TensorDtypes=Float, TensorDeviceTypes=TensorOptions(...)), but Rank 0 is running collective:
// CollectiveFingerPrint(SequenceNumber=5, OpType=BROADCAST, ...).Collectives differ in the
// following aspects: ...". Ranks are the two ranks, Text and Detail their fingerprints.
func parseDesync(b []byte, l *Line) {
	l.Kind = KindTorchDesync
	l.Fatal = true
	l.Ranks = [2]int{-1, -1}
	s := scanner{b: b}
	if !s.skipTo("on ranks. Rank ") {
		return
	}
	if r, ok := s.int(); ok {
		l.Ranks[0] = r
		l.Torch.Rank = r
	}
	if !s.skipTo(" is running collective: ") {
		return
	}
	rest := s.rest()
	but := index(rest, ", but Rank ")
	if but < 0 {
		l.Text = rest
		return
	}
	l.Text = rest[:but]
	s = scanner{b: rest, i: but + len(", but Rank ")}
	if r, ok := s.int(); ok {
		l.Ranks[1] = r
	}
	if !s.skipTo(" is running collective: ") {
		return
	}
	other := s.rest()
	if d := index(other, "Collectives differ"); d >= 0 {
		other = other[:d]
	}
	l.Detail = bytes.TrimRight(other, ". ")
}

// The lines of PyTorch's desync report (TraceUtils.h, TORCH_NCCL_DESYNC_DEBUG=1) that name
// the ranks that caused a timeout, and what each says of them.
const (
	laggingNever    = "are the lagging ranks that caused this timeout"
	laggingUnfinish = "] joined but didn't finish collective #"
	laggingNotNext  = ", but didn't join collective #"
)

// parseLagging reads a desync report's verdict: "To our best knowledge, ranks [3, 7] are the
// lagging ranks that caused this timeout. They never joined any collectives", "[3] joined but
// didn't finish collective #41 (count from 1)", "[0, 1] finished collective #41, but didn't
// join collective #42 (count from 1)". Text is the list of ranks, Code the collective, Detail
// what the report says of them; a line that is none of these stays unknown.
func parseLagging(b []byte, l *Line) {
	var list []byte
	switch {
	case contains(b, laggingNever):
		i := index(b, "ranks [")
		if i < 0 {
			return
		}
		list = b[i+len("ranks ["):]
		l.Detail = bytesOf(laggingNeverTag)
	case contains(b, laggingUnfinish):
		i := bytes.LastIndexByte(b[:index(b, laggingUnfinish)], '[')
		if i < 0 {
			return
		}
		list = b[i+1:]
		l.Code = int(keyValue(b, "finish collective #"))
		l.Detail = bytesOf(laggingUnfinishedTag)
	case contains(b, laggingNotNext) && contains(b, "] finished collective #"):
		i := bytes.LastIndexByte(b[:index(b, "] finished collective #")], '[')
		if i < 0 {
			return
		}
		list = b[i+1:]
		l.Code = int(keyValue(b, laggingNotNext[2:]))
		l.Detail = bytesOf(laggingNotJoinedTag)
	default:
		return
	}
	end := bytes.IndexByte(list, ']')
	if end <= 0 || l.Code < 0 {
		return
	}
	l.Kind = KindTorchLagging
	l.Fatal = true
	l.Msg = trimSpace(b)
	l.Text = list[:end]
}

// The desync report's three verdicts, as short tags in Line.Detail (no field is longer than
// its line, however short), worded by laggingWords when the line becomes an event.
const (
	laggingNeverTag      = "never"
	laggingUnfinishedTag = "unfinished"
	laggingNotJoinedTag  = "not joined"
)

// laggingWords is a desync verdict in words, with the collective it names.
func laggingWords(tag []byte, code int) string {
	w := map[string]string{laggingNeverTag: "never joined any collective",
		laggingUnfinishedTag: "joined but did not finish collective",
		laggingNotJoinedTag:  "finished the collective before it but did not join collective"}[string(tag)]
	if code > 0 {
		w += " #" + strconv.Itoa(code)
	}
	return w
}

// parseBarrier reads a monitored barrier's "[Rank 0]: Ranks 1, 3 failed to pass
// monitoredBarrier in 30000 ms" and "Rank 1 failed to pass monitoredBarrier in 30000 ms",
// with the collective ProcessGroupWrapper guarded when the line quotes it ("Monitored
// Barrier encountered error running collective: CollectiveFingerPrint(...)"). Text is the
// list of ranks, Detail the fingerprint.
func parseBarrier(b []byte, l *Line) {
	l.Kind = KindTorchBarrier
	l.Fatal = true
	l.Torch.Rank = bracketRank(b)
	end := index(b, " failed to pass monitoredBarrier")
	if end > 0 {
		head := b[:end]
		if r := bytes.LastIndex(head, bytesOf("Rank")); r >= 0 {
			list := head[r+len("Rank"):]
			l.Text = trimSpace(bytes.TrimPrefix(list, bytesOf("s")))
		}
	}
	if f := index(b, "CollectiveFingerPrint("); f >= 0 {
		l.Detail = b[f:]
	}
}

// Fingerprint reads a CollectiveFingerPrint as PyTorch prints it (with or without
// SequenceNumber, which releases before 2.0 did not print, and the bare
// "CollectiveFingerPrint(SequenceNumber=5OpType=BARRIER)" of a collective without tensors).
func Fingerprint(b []byte) snapshot.TorchWork {
	w := snapshot.TorchWork{Seq: keyValue(b, "SequenceNumber="), Op: string(keyWord(b, "OpType="))}
	if i := index(b, "TensorShape=["); i >= 0 {
		rest := b[i+len("TensorShape=["):]
		if j := bytes.IndexByte(rest, ']'); j >= 0 {
			w.Shape = snapshot.CutMsg(string(rest[:j]))
		}
	}
	if i := index(b, "TensorDtypes="); i >= 0 {
		rest := b[i+len("TensorDtypes="):]
		if j := index(rest, ", TensorDeviceTypes="); j >= 0 {
			rest = rest[:j]
		} else if j := bytes.IndexByte(rest, ')'); j >= 0 {
			rest = rest[:j]
		}
		w.Dtypes = snapshot.CutMsg(string(bytes.Trim(rest, "[] ")))
	}
	return w
}

// exceptionSuffixes end the names of the exception classes a rank dies of.
var exceptionSuffixes = []string{"Error", "Exception", "Interrupt", "Exit", "Failure"}

// exceptionName returns the exception class a traceback's last line starts with
// ("torch.OutOfMemoryError: CUDA out of memory. ...", "ValueError: bad", "KeyboardInterrupt")
// and the message after it; ok is false for any other line.
func exceptionName(b []byte) (name, msg []byte, ok bool) {
	n := 0
	for n < len(b) && n < 160 {
		c := b[n]
		if c == '.' || c == '_' || isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'z' {
			n++
			continue
		}
		break
	}
	if n == 0 || isDigit(b[0]) || b[0] == '.' || b[n-1] == '.' {
		return nil, nil, false
	}
	name = b[:n]
	rest := b[n:]
	switch {
	case len(rest) == 0:
	case rest[0] == ':' && (len(rest) == 1 || rest[1] == ' '):
		msg = trimSpace(rest[1:])
	default:
		return nil, nil, false
	}
	// The class itself, without its module: CamelCase ending in a known suffix, longer
	// than the suffix ("Error:" alone is a log's word, not a class).
	class := name
	if d := bytes.LastIndexByte(name, '.'); d >= 0 {
		class = name[d+1:]
	}
	if len(class) == 0 || class[0] < 'A' || class[0] > 'Z' {
		return nil, nil, false
	}
	for _, suf := range exceptionSuffixes {
		if len(class) > len(suf) && hasSuffix(class, suf) {
			return name, msg, true
		}
	}
	return nil, nil, false
}

// parseException reads the line that ends a Python traceback, the exception that ended a
// rank's process: Detail is its class, Text its message, Torch.Bytes the allocation of a
// CUDA out-of-memory error. It reports whether b was one.
func parseException(b []byte, l *Line) bool {
	name, msg, ok := exceptionName(trimSpace(b))
	if !ok {
		return false
	}
	l.Kind = KindRankExit
	l.Fatal = true
	l.Detail, l.Text = name, msg
	l.Torch.Bytes = oomBytes(msg)
	return true
}

// oomBytes reads the allocation of "CUDA out of memory. Tried to allocate 2.00 GiB (GPU
// 0; ...)"; 0 when the message names none.
func oomBytes(msg []byte) int64 {
	i := index(msg, "Tried to allocate ")
	if i < 0 {
		return 0
	}
	s := msg[i+len("Tried to allocate "):]
	j := 0
	for j < len(s) && (isDigit(s[j]) || s[j] == '.') {
		j++
	}
	v, err := strconv.ParseFloat(string(s[:j]), 64)
	if err != nil || j+1 >= len(s) || s[j] != ' ' {
		return 0
	}
	unit := s[j+1:]
	scale := float64(0)
	for _, u := range []struct {
		name  string
		scale float64
	}{{"bytes", 1}, {"B", 1}, {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if hasPrefix(unit, u.name) {
			scale = u.scale
			break
		}
	}
	if scale == 0 || v*scale > 1<<60 {
		return 0
	}
	return int64(v * scale)
}

// signalNames are the names of the signals a rank dies of, as torchrun prints them.
var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS",
	8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}

// torchrun's failure record: a field per line, padded to one width.
const (
	recordRank      = "rank      : "
	recordHost      = "host      : "
	recordExitcode  = "exitcode  : "
	recordTraceback = "traceback : "
	// recordRoot heads the record of the failure torchrun saw first, its root cause.
	recordRoot = "Root Cause (first observed failure):"
	// RootCauseWords are the Text of the KindExitRecord line recordRoot.
	RootCauseWords = "first observed failure"
)

// parseExitRecord reads a field of torchrun's failure record that matters:
//
//	host      : gpu-node03
//	rank      : 2 (local_rank: 2)
//	exitcode  : -9 (pid: 1212)
//	traceback : Signal 9 (SIGKILL) received by PID 1212
//
// and the agent's own "Signal 9 (SIGKILL) received by PID 1212". The rank and host fields are
// KindExitRecord (whose failure the next fields are), the exit code and the signal
// KindRankExit. It reports whether b was one of them.
func parseExitRecord(b []byte, l *Line) bool {
	t := trimSpace(b)
	switch {
	case hasPrefix(t, recordRoot):
		l.Kind = KindExitRecord
		l.Torch.Rank = -1
		l.Text = bytesOf(RootCauseWords)
		return true
	case hasPrefix(t, recordRank):
		s := scanner{b: t, i: len(recordRank)}
		r, ok := s.int()
		if !ok {
			return false
		}
		l.Kind = KindExitRecord
		l.Torch.Rank, l.LocalRk = r, -1
		if s.skipTo("local_rank: ") {
			if lr, ok := s.int(); ok {
				l.LocalRk = lr
			}
		}
		return true
	case hasPrefix(t, recordHost):
		s := scanner{b: t, i: len(recordHost)}
		l.Kind = KindExitRecord
		l.Torch.Rank = -1
		l.Torch.Host = s.word()
		return true
	case hasPrefix(t, recordExitcode):
		s := scanner{b: t, i: len(recordExitcode)}
		code, ok := s.int()
		if !ok {
			return false
		}
		l.Kind = KindRankExit
		l.Fatal = true
		l.Torch.Launcher = true
		l.Code = code
		if code < 0 {
			l.Detail = bytesOf(signalNames[-code])
		}
		l.Torch.PID = int(max(keyValue(t, "(pid: "), 0))
		return true
	}
	if i := index(t, " received by PID "); i > 0 {
		s := scanner{b: t}
		if !s.skipTo("Signal ") {
			return false
		}
		sig, ok := s.int()
		if !ok || sig <= 0 || sig > 64 {
			return false
		}
		l.Kind = KindRankExit
		l.Fatal = true
		l.Torch.Launcher = true
		l.Code = -sig
		if s.lit(" (") {
			w := s.rest()
			if c := bytes.IndexByte(w, ')'); c > 0 {
				l.Detail = w[:c]
			}
		}
		if len(l.Detail) == 0 {
			l.Detail = bytesOf(signalNames[sig])
		}
		l.Torch.PID = int(max(keyValue(t, " received by PID "), 0))
		return true
	}
	return false
}
