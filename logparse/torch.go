package logparse

import (
	"bytes"

	"github.com/ncclwatch/watchdog/snapshot"
)

// parseTorch recognises PyTorch ProcessGroupNCCL lines and torchrun's failure line. The
// launcher's and c10's glog prefixes ("[E1121 22:51:18.197257951 ProcessGroupNCCL.cpp:689] ")
// were already stripped with the other console prefixes (prefix.go).
func parseTorch(b []byte, l *Line) {
	l.Torch.Rank = -1
	l.Kind = KindUnknown
	l.Msg = b
	t := &l.Torch
	if i := index(b, "Last error:"); i > 0 && quotedInside(b, b[i+len("Last error:"):], l) {
		return
	}
	if parseFlightRecorder(b, l) {
		return
	}
	switch {
	case contains(b, "Watchdog caught collective operation timeout: WorkNCCL("):
		l.Kind = KindTorchTimeout
		t.Rank = bracketRank(b)
		if contains(b, "[PG ") {
			pgPrefix(b, t)
		}
		s := scanner{b: b}
		s.skipTo("WorkNCCL(")
		inner := s.rest()
		t.SeqNum = keyValue(inner, "SeqNum=")
		t.OpType = keyWord(inner, "OpType=")
		t.NumelIn = keyValue(inner, "NumelIn=")
		t.NumelOut = keyValue(inner, "NumelOut=")
		t.TimeoutMs = keyValue(inner, "Timeout(ms)=")
		t.RanForMs = keyValue(inner, "ran for ")
	case contains(b, "Detected mismatch between collectives on ranks"):
		parseDesync(b, l)
	case contains(b, "failed to pass monitoredBarrier"):
		parseBarrier(b, l)
	case contains(b, "collective #") || contains(b, "are the lagging ranks"):
		parseLagging(b, l)
	case contains(b, "failure detected by watchdog at work sequence id: "):
		// 2.6+: the watchdog caught a failed or timed-out work (Fatal), unlike the dump's
		// status line.
		l.Kind = KindTorchWorkStatus
		l.Fatal = true
		l.Ranks = [2]int{-1, -1}
		pgPrefix(b, t)
		t.SeqNum = keyValue(b, "work sequence id: ")
		t.Enqueued = keyValue(b, "last enqueued work: ")
		t.Completed = keyValue(b, "last completed work: ")
		saneCounters(t)
	case contains(b, "ast enqueued NCCL work: "):
		// "Exception (either an error or timeout) detected by watchdog at work: 7753, last
		// enqueued NCCL work: 7755, last completed NCCL work: 7752.", "Timeout at NCCL work:
		// N, ...", the dump signal's "Last enqueued NCCL work: N, last completed ...".
		l.Kind = KindTorchWorkStatus
		pgPrefix(b, t)
		t.SeqNum = keyValue(b, "detected by watchdog at work: ")
		if t.SeqNum < 0 {
			t.SeqNum = keyValue(b, "Timeout at NCCL work: ")
		}
		l.Fatal = t.SeqNum >= 0
		t.Enqueued = keyValue(b, "ast enqueued NCCL work: ")
		t.Completed = keyValue(b, "ast completed NCCL work: ")
		saneCounters(t)
		// 2.6+: "Received a dump signal due to a collective timeout from  rank 13": the
		// counters are this rank's, the timeout another's (the first to time out, which
		// may itself have been only waiting).
		l.Ranks = [2]int{dumpFrom(b), -1}
	case contains(b, "is setting up NCCL communicator and ret") && contains(b, "got error"):
		parseStoreFailure(b, l)
	case contains(b, "Test NCCL failure ") || contains(b, "Test CUDA failure "):
		// " .. host pid 77: Test NCCL failure ...": from the words on.
		i := max(index(b, "Test NCCL failure "), index(b, "Test CUDA failure "))
		host, pid := testSource(b[:i])
		l.Msg = b[i:]
		parseTestFailure(b[i:], l)
		l.Torch.Host, l.Torch.PID = host, pid
	case contains(b, ": Test failure "):
		// " .. host pid 77: Test failure common.cu:1165": where the test gave up, after
		// the failure line; it says which process that was. Not an event of its own.
		l.Torch.Host, l.Torch.PID = testSource(b[:index(b, ": Test failure ")+2])
	case hasPrefix(b, "Last error:"):
		// PyTorch quotes NCCL's last WARN after its error, on this line or the next.
		ParseQuoted(trimSpace(b[len("Last error:"):]), l)
	case contains(b, "Heartbeat monitor timed out") || contains(b, "s watchdog got stuck for "):
		parseTorchStuck(b, l)
	case contains(b, "watchdog thread terminated with exception: CUDA error: "):
		parseWatchdogCUDA(b, l)
	case contains(b, "watchdog thread terminated with exception") ||
		contains(b, "we are taking the entire process down") ||
		hasPrefix(b, "terminate called after throwing") || contains(b, "NCCL communicator was aborted on rank "):
		l.Kind = KindTorchTerminate
		torchRank(b, t)
	case contains(b, "ProcessGroupNCCL created ncclComm_ 0x"):
		l.Kind = KindTorchCommCreated
		pgPrefix(b, t)
		s := scanner{b: b}
		s.skipTo("ncclComm_ 0x")
		l.Comm, _ = s.hex()
	case hasPrefix(b, "NCCL error") || contains(b, "NCCL error in: ") || contains(b, "NCCL error: ") ||
		contains(b, "DistBackendError: NCCL error") || contains(b, "NCCL Error "):
		// "NCCL error in: <file>:<line>, unhandled system error (run with ...), NCCL
		// version 2.18.6": the result NCCL returned, and its version.
		l.Kind = KindTorchNCCLError
		l.Code = ncclResultOf(b)
		if s := (scanner{b: b}); s.skipTo("NCCL version ") {
			l.Text = bytes.TrimRight(s.word(), ",.")
		}
	case hasPrefix(b, "nccl") && ncclResultOf(b[:min(len(b), 24)]) != 0 && bytes.IndexByte(b, ':') > 0:
		// "ncclSystemError: System call (e.g. socket, malloc) ...": the detail PyTorch
		// prints under the error, alone when the first line was cut.
		l.Kind = KindTorchNCCLError
		l.Code = ncclResultOf(b[:min(len(b), 24)])
	case contains(b, "failed (exitcode: ") && contains(b, "local_rank: "):
		// torchrun: "E1121 ... api.py:986] failed (exitcode: 3) local_rank: 1 (pid: 1211) of binary: ..."
		l.Kind = KindLauncherExit
		l.Code = int(keyValue(b, "exitcode: "))
		l.LocalRk = int(keyValue(b, "local_rank: "))
		t.PID = int(keyValue(b, "(pid: "))
	}
	if l.Kind == KindUnknown && !parseExitRecord(b, l) {
		// Last, as the rarest and the loosest: the exception that ended a traceback, whose
		// class may have been taken for a host label.
		if name, _, ok := exceptionName(trimSpace(l.Label)); ok && len(l.Label) > 0 {
			parseException(name, l)
			l.Text = trimSpace(b)
			l.Torch.Bytes = oomBytes(l.Text)
		} else if len(b) > 0 {
			parseException(b, l)
		}
	}
}

// maxWorkSeq bounds a believable work counter: PyTorch numbers works from 1, and no job
// enqueues 2^40 of them. A larger value is memory PyTorch printed unset.
const maxWorkSeq = 1 << 40

// saneCounters drops counters no rank can have: beyond maxWorkSeq, or more works completed
// than enqueued (a posted log printed 93459313471793 completed of 1 enqueued).
func saneCounters(t *Torch) {
	for _, v := range []*int64{&t.SeqNum, &t.Enqueued, &t.Completed} {
		if *v > maxWorkSeq {
			*v = -1
		}
	}
	if t.Enqueued >= 0 && t.Completed > t.Enqueued {
		t.Completed = -1
	}
}

// dumpFrom reads the rank a dump signal names, -1 when the line is no dump signal.
func dumpFrom(b []byte) int {
	s := scanner{b: b}
	if !s.skipTo("dump signal due to a collective timeout from ") {
		return -1
	}
	for s.i < len(s.b) && s.b[s.i] == ' ' {
		s.i++
	}
	if !hasPrefix(s.b[s.i:], "rank ") {
		return -1
	}
	s.i += len("rank ")
	v, ok := s.dec()
	if !ok || v < 0 || v > 1<<24 {
		return -1
	}
	return int(v)
}

// torchRank reads the rank of a PyTorch message: its process group prefix ("[PG 0 Rank
// 1]", "[PG ID 0 PG GUID 0(default_pg) Rank 2]", after "what():" too) or "[Rank N]".
func torchRank(b []byte, t *Torch) {
	if contains(b, "[PG ") {
		pgPrefix(b, t)
	} else {
		t.Rank = bracketRank(b)
	}
}

// parseTorchStuck reads the heartbeat monitor's "Heartbeat monitor timed out! Process will be
// terminated after dumping debug info. workMetaList_.size()=103" (2.2+) and its fatal
// "ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in
// monitoring enqueued collectives": the watchdog thread itself is blocked. Code is the
// number of works still queued on the rank, -1 when the line does not say.
func parseTorchStuck(b []byte, l *Line) {
	l.Kind = KindTorchStuck
	l.Fatal = true
	torchRank(b, &l.Torch)
	l.Code = int(min(keyValue(b, "workMetaList_.size()="), 1<<30))
	if s := keyValue(b, "s watchdog got stuck for "); s >= 0 {
		l.Torch.TimeoutMs = min(s, 1<<40) * 1000
	}
}

// parseWatchdogCUDA reads "[PG 0 (default_pg) Rank 0] Process group watchdog thread terminated
// with exception: CUDA error: an illegal memory access was encountered" (1.13-2.1 "NCCL
// watchdog thread ..."): the watchdog's check of the GPU's work found its CUDA context dead,
// from a kernel that faulted on that GPU. It is read as the rank's CUDA failure.
func parseWatchdogCUDA(b []byte, l *Line) {
	l.Kind = KindCudaError
	l.Quoted = true
	l.Fatal = true
	l.Torch.Watchdog = true
	torchRank(b, &l.Torch)
	s := scanner{b: b}
	s.skipTo("CUDA error: ")
	e := s.rest()
	// A pasted line may go on with PyTorch's advice that followed on lines of its own.
	for _, next := range []string{" CUDA kernel errors", " For debugging", " Compile with", "\\n"} {
		if k := index(e, next); k > 0 {
			e = e[:k]
		}
	}
	l.Detail = trimSpace(bytes.TrimRight(e, ". "))
}

// quotedInside reads the NCCL WARN that a whole PyTorch error pasted on one line quotes after
// "Last error:" ("[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed ...
// ncclRemoteError: ... Last error: NET/IB : Got completion from peer ... with error 12"):
// when it is a WARN the rules know, it is the line's event, for the rank the line names.
func quotedInside(b, quote []byte, l *Line) bool {
	if len(trimSpace(quote)) == 0 {
		return false
	}
	var t Torch
	t.Rank = -1
	torchRank(b[:len(b)-len(quote)], &t)
	var q Line
	q.LauncherRank, q.LauncherFrom, q.Task = l.LauncherRank, l.LauncherFrom, l.Task
	ParseQuoted(trimSpace(quote), &q)
	if q.Kind == KindWarn || q.Kind == KindUnknown {
		return false
	}
	q.Torch.Rank = t.Rank
	*l = q
	return true
}

// ncclResultOf finds the ncclResult_t an error text names, by its enum name or by
// ncclGetErrorString's words; 0 when none.
func ncclResultOf(b []byte) int {
	switch {
	case contains(b, "ncclUnhandledCudaError") || contains(b, "unhandled cuda error"):
		return snapshot.NCCLUnhandledCuda
	case contains(b, "ncclSystemError") || contains(b, "unhandled system error"):
		return snapshot.NCCLSystemError
	case contains(b, "ncclInternalError") || contains(b, "internal error"):
		return snapshot.NCCLInternalError
	case contains(b, "ncclInvalidArgument") || contains(b, "invalid argument"):
		return snapshot.NCCLInvalidArg
	case contains(b, "ncclInvalidUsage") || contains(b, "invalid usage"):
		return snapshot.NCCLInvalidUsage
	case contains(b, "ncclRemoteError") || contains(b, "remote process exited"):
		return snapshot.NCCLRemoteError
	}
	return 0
}

// parseStoreFailure reads PyTorch's "[3] is setting up NCCL communicator and retrieving
// ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error:
// Connection reset by peer": rank 3 waited for the unique id rank 0 should have published.
func parseStoreFailure(b []byte, l *Line) {
	l.Kind = KindTorchStore
	l.Ranks = [2]int{-1, -1}
	// The waiting rank's "[3]" is often read as a launcher tag already.
	if s := (scanner{b: b}); s.lit("[") {
		if r, ok := s.int(); ok {
			l.Torch.Rank = r
		}
	}
	s := scanner{b: b}
	if s.skipTo("ncclUniqueId from [") {
		if r, ok := s.int(); ok {
			l.Ranks[0] = r
		}
	}
	if s.skipTo("got error: ") {
		r := s.rest()
		if e := bytes.Index(r, bytesOf(". This")); e > 0 {
			r = r[:e]
		}
		l.Detail = trimSpace(r)
	}
}

// testSource reads who nccl-tests says failed from what precedes its words: "host: " or
// " .. host pid 77: ". Anything else names no one.
func testSource(b []byte) ([]byte, int) {
	b = trimSpace(b)
	if hasPrefix(b, "..") {
		b = trimSpace(b[2:])
	}
	if len(b) < 2 || b[len(b)-1] != ':' {
		return nil, 0
	}
	b = b[:len(b)-1]
	host, pid := b, 0
	if sp := bytes.Index(b, bytesOf(" pid ")); sp > 0 {
		v, ok := atoi(b[sp+len(" pid "):])
		if !ok {
			return nil, 0
		}
		host, pid = b[:sp], v
	}
	if len(host) == 0 || len(host) > 64 || bytes.IndexByte(host, ' ') >= 0 {
		return nil, 0
	}
	return host, pid
}

// parseTestFailure reads nccl-tests' failure lines, which many posted logs end with:
// "Test NCCL failure common.cu:958 'unhandled system error / <NCCL's last WARN>'" and
// "Test CUDA failure common.cu:941 'system not yet initialized'". NCCL's last WARN, when
// the line quotes one, says more than the result; else the result is the event.
func parseTestFailure(b []byte, l *Line) {
	q := bytes.IndexByte(b, '\'')
	if q < 0 {
		l.Kind = KindTorchNCCLError
		return
	}
	inner := bytes.TrimSuffix(trimSpace(b[q+1:]), []byte("'"))
	if hasPrefix(b, "Test CUDA failure ") {
		l.Kind = KindCudaError
		l.Quoted = true
		l.Fatal = true
		l.Detail = inner
		return
	}
	result, last, _ := bytes.Cut(inner, []byte(" / "))
	if last = trimSpace(last); len(last) > 0 {
		var quoted Line
		quoted.LauncherRank, quoted.LauncherFrom, quoted.Task = l.LauncherRank, l.LauncherFrom, l.Task
		ParseQuoted(last, &quoted)
		if quoted.Kind != KindWarn && quoted.Kind != KindUnknown {
			*l = quoted
			return
		}
	}
	l.Kind = KindTorchNCCLError
	l.Code = ncclResultOf(result)
}

// ParseQuoted reads one of NCCL's WARN messages as PyTorch quotes it after "Last error:",
// without NCCL's prefix: classified as the WARN would be, and marked Quoted. An empty
// message is a quote that follows on the next line.
func ParseQuoted(b []byte, l *Line) {
	rank, from, task := l.LauncherRank, l.LauncherFrom, l.Task
	l.reset()
	l.LauncherRank, l.LauncherFrom, l.Task = rank, from, task
	l.Torch.Rank = -1
	b = trimRight(b)
	// Launcher tags ("10: ", "[rank3]:") may come again before the quote; a word and a
	// colon is NCCL's own ("socketStartConnect: ..."), not a pdsh host label.
	for n := 0; n < 4 && len(b) > 0 && (b[0] == '[' || b[0] == ' ' || isDigit(b[0])); n++ {
		rest, ok := stripOne(b, l)
		if !ok {
			break
		}
		b = bytes.TrimLeft(rest, " ")
	}
	l.Quoted = true
	l.Msg = b
	if len(b) == 0 {
		return
	}
	parseWarn(l)
}

// bracketRank reads the "[Rank N]" of a torch message; -1 when absent.
func bracketRank(b []byte) int {
	s := scanner{b: b}
	if !s.skipTo("[Rank ") {
		return -1
	}
	r, ok := s.int()
	if !ok {
		return -1
	}
	return r
}

// pgPrefix reads "[PG ID <id> PG GUID <guid>(<desc>) Rank <rank>]".
func pgPrefix(b []byte, t *Torch) {
	s := scanner{b: b}
	// "[PG ID 0 PG GUID 0(default_pg) Rank 1]" (2.4+) or "[PG 1 Rank 0]".
	if !s.skipTo("[PG ") {
		return
	}
	end := bytes.IndexByte(b[s.i:], ']')
	if end < 0 {
		return
	}
	pg := b[s.i : s.i+end]
	id := pg
	if hasPrefix(id, "ID ") {
		id = id[len("ID "):]
	}
	if sp := bytes.IndexByte(id, ' '); sp > 0 {
		t.PG = id[:sp]
	}
	if o := bytes.IndexByte(pg, '('); o >= 0 {
		if c := bytes.IndexByte(pg[o:], ')'); c > 0 {
			t.PGDesc = pg[o+1 : o+c]
		}
	}
	if r := bytes.LastIndex(pg, bytesOf(" Rank ")); r >= 0 {
		if v, ok := atoi(pg[r+len(" Rank "):]); ok {
			t.Rank = v
		}
	}
}

// keyValue returns the decimal after key, or -1.
func keyValue(b []byte, key string) int64 {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return -1
	}
	s := scanner{b: b, i: i + len(key)}
	v, ok := s.dec()
	if !ok {
		return -1
	}
	return v
}

// keyWord returns the word after key up to ',' ')' or space.
func keyWord(b []byte, key string) []byte {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return nil
	}
	w := b[i+len(key):]
	for j, c := range w {
		if c == ',' || c == ')' || c == ' ' {
			return w[:j]
		}
	}
	return w
}
