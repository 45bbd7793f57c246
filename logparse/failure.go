package logparse

import (
	"bytes"

	"github.com/ncclwatch/watchdog/snapshot"
)

// The readers of NCCL's failure messages: sockets, shared memory, GPU assignment, versions,
// InfiniBand set-up, CUDA and proxy errors. Their wording changed across releases (NCCL's
// misc/socket.cc, transport/net_ib*, proxy.cc of 2.4 to 2.30); each reader accepts every form and keeps
// what a rule needs to name the cause: the peer address, the system's reason, the ranks.

// isSocketFailure reports a message of NCCL's socket code (bootstrap, proxy, NET/Socket), of
// any version: "socketStartConnect: Connect to ...", "ncclOsSocketPollConnect to ...",
// "Net : Call to recv from ...", "Connect to ... failed" (2.4), "Call to connect failed".
func isSocketFailure(m []byte) bool {
	switch {
	case hasPrefix(m, "socket") || hasPrefix(m, "ncclOsSocket") || hasPrefix(m, "ncclSocket") ||
		hasPrefix(m, "NET/Socket") || hasPrefix(m, "Bootstrap") || hasPrefix(m, "bootstrap") ||
		hasPrefix(m, "Net : ") || hasPrefix(m, "Connect to ") || hasPrefix(m, "Call to connect") ||
		hasPrefix(m, "Call to recv") || hasPrefix(m, "Call to send") || hasPrefix(m, "Message truncated") ||
		hasPrefix(m, "Socket "):
		return true
	}
	return contains(m, ": connect to ") || contains(m, ": Connect to ") || contains(m, "connect returned ") ||
		contains(m, "PollConnect to ")
}

// parseSocketFailure classifies a socket message: a connection that could not be opened
// (with the address and the reason), one that broke (recv/send failed, closed by the peer),
// no usable interface, two ends that disagree on a message size, a stranger on NCCL's port.
func parseSocketFailure(l *Line) {
	m := l.Msg
	l.Kind = KindSocketError
	switch {
	case contains(m, "interface found") || contains(m, " is neither AF_INET") ||
		contains(m, "Address family not supported"):
		l.Kind = KindNoInterface
		l.Fatal = true
		l.Detail = m
	case contains(m, "Connection closed by remote peer "):
		parseConnClosedRemote(l)
	case contains(m, "essage truncated"):
		// Both ends of a bootstrap or NET/Socket connection disagree on a size: NCCL's
		// maintainers trace this to different NCCL versions or settings between ranks.
		l.Kind = KindNetSizeMismatch
		if s := (scanner{b: m}); s.skipTo("peer ") {
			l.Text = s.peer()
		}
	case contains(m, "Call to recv") || contains(m, "Call to send"):
		// "socketProgressOpt: Call to recv from 10.0.0.7<43125> failed : Connection reset by peer"
		s := scanner{b: m}
		if s.skipTo("recv from ") || s.skipTo("send to ") {
			l.Text = s.peer()
		}
		l.Detail = reasonAfter(m)
		l.Fatal = true
	case contains(m, "wrong type"):
		// The magic matched, so a rank of this job connected, but with another kind of
		// socket ("wrong type 4 != 3": NET/IB where NET/Socket listens): the nodes chose
		// different network transports.
		l.Code = snapshot.SocketWrongType
		l.Fatal = true
		l.Detail = m
		if s := (scanner{b: m}); s.skipTo("wrong type ") {
			l.Detail = trimSpace(s.rest())
		}
	case contains(m, "wrong magic"):
		// Something that is not this job's NCCL connected to its port: a scanner, a health
		// check, a rank of another run.
		l.Detail = m
	case contains(m, "failed while polling"):
		// "Socket recv failed while polling for opId=0x..": the proxy's connection to the
		// process it serves broke mid-operation.
		l.Code = snapshot.SocketProxyPoll
		l.Fatal = true
	case contains(m, "onnect"):
		parseConnectFailure(l, true)
	default:
		l.Detail = reasonAfter(m)
	}
}

// parseConnectFailure reads a failed connect in every version's words: "Connect to A
// failed : R", "connect to A returned R, exceeded error retry count", "socketPollConnect:
// Connect to A returned 111(Connection refused) errno 111(...)", "PollConnect to A failed
// with error R", "Call to connect returned R, retrying" (INFO), "exceeded retries (N)".
func parseConnectFailure(l *Line, fatal bool) {
	m := l.Msg
	l.Kind = KindSocketConnect
	l.Fatal = fatal
	for _, p := range []string{"Connect to ", "connect to "} {
		if i := index(m, p); i >= 0 {
			s := scanner{b: m, i: i + len(p)}
			l.Text = s.peer()
			break
		}
	}
	switch {
	case contains(m, " returned "):
		s := scanner{b: m}
		s.skipTo(" returned ")
		r := s.rest()
		if o := bytes.IndexByte(r, '('); o >= 0 && o < 8 {
			// "111(Connection refused) errno 111(Connection refused)"
			if c := bytes.IndexByte(r[o:], ')'); c > 0 {
				l.Detail = r[o+1 : o+c]
				break
			}
		}
		if c := bytes.IndexByte(r, ','); c >= 0 {
			r = r[:c]
		}
		l.Detail = trimSpace(r)
	case contains(m, "failed with error "):
		s := scanner{b: m}
		s.skipTo("failed with error ")
		l.Detail = trimSpace(s.rest())
	case contains(m, "exceeded "):
		s := scanner{b: m}
		s.skipTo("exceeded ")
		l.Detail = trimSpace(m[s.i-len("exceeded "):])
	default:
		l.Detail = reasonAfter(m)
	}
	l.Code = connectAttempts(m)
}

// connectAttempts reads how many times NCCL tried: "retrying (5/34)", "exceeded retries
// (35)", "exceeded error retry count (35)", "... after 35 attempts"; 0 when not printed.
func connectAttempts(m []byte) int {
	for _, key := range []string{"retrying (", "retries (", "retry count (", "timeouts (", "after "} {
		i := bytes.LastIndex(m, bytesOf(key))
		if i < 0 {
			continue
		}
		s := scanner{b: m, i: i + len(key)}
		if n, ok := s.int(); ok && n >= 0 && n < 1<<20 && (key != "after " || s.lit(" attempts")) {
			return n
		}
	}
	return 0
}

// reasonAfter is the text after the last " : " or ": " (strerror), or nil.
func reasonAfter(m []byte) []byte {
	if i := bytes.LastIndex(m, bytesOf(" : ")); i >= 0 {
		return trimSpace(m[i+3:])
	}
	if i := bytes.LastIndex(m, bytesOf("failed: ")); i >= 0 {
		return trimSpace(m[i+len("failed: "):])
	}
	return nil
}

// isShmFailure reports NCCL's shared-memory failures: "Error: failed to extend /dev/shm/..",
// "Error while creating shared memory segment ..", "Error while attaching to shared memory
// segment ..", and 2.7's "Call to posix_fallocate failed : No space left on device".
func isShmFailure(m []byte) bool {
	return contains(m, "/dev/shm") || contains(m, "shared memory segment") || hasPrefix(m, "Call to posix_fallocate") ||
		hasPrefix(m, "Call to shm_open") || hasPrefix(m, "ncclShmOpen")
}

func parseShmFailure(l *Line) {
	m := l.Msg
	l.Kind = KindShmError
	l.Fatal = true
	l.Detail = m
	// Creating or growing a segment fails when /dev/shm is full; attaching fails when the
	// creator's segment is gone or not visible (another IPC namespace): two causes.
	if contains(m, "attach") || contains(m, "No such file") {
		l.Code = snapshot.ShmAttach
	}
}

// parseTwoRanks reads "rank A and rank B both on CUDA device X" and "rank A version X rank
// B version Y" into Ranks and Detail.
func parseTwoRanks(l *Line, kind Kind) {
	m := l.Msg
	l.Kind = kind
	l.Fatal = true
	l.Ranks = [2]int{-1, -1}
	s := scanner{b: m}
	if !s.skipTo("rank ") {
		return
	}
	a, ok := s.int()
	if !ok {
		return
	}
	l.Ranks[0] = a
	var va []byte
	if s.lit(" version ") {
		va = s.word()
	}
	if !s.skipTo("rank ") {
		return
	}
	if b, ok := s.int(); ok {
		l.Ranks[1] = b
	}
	switch kind {
	case KindDuplicateGPU:
		if s.skipTo("device ") {
			l.Detail = s.word()
		}
	case KindVersionMismatch:
		if s.lit(" version ") {
			vb := s.word()
			// Both versions as NCCL printed them, e.g. "21903 22105": a slice of the line
			// from the first to the second.
			if len(va) > 0 && len(vb) > 0 {
				start := cap(m) - cap(va)
				end := cap(m) - cap(vb) + len(vb)
				if start >= 0 && end <= len(m) && start < end {
					l.Detail = m[start:end]
				}
			}
		}
	}
}

// parseIBSetup reads verbs failures outside the data path: "Call to ibv_modify_qp failed
// with error Network is unreachable", 2.28's "Call to ibv_modify_qp failed with 110
// Connection timed out, on dev mlx5_3:1, ...", "NET/IB : Unable to open device mlx5_2".
func parseIBSetup(l *Line) {
	m := l.Msg
	l.Kind = KindIBSetup
	s := scanner{b: m}
	switch {
	case s.lit("Call to "):
		l.Detail = s.word()
		// Queue pairs, registrations and completion queues are what a connection needs;
		// a device NCCL only probes (open, query) may fail while others carry the job.
		for _, v := range []string{"ibv_modify_qp", "ibv_reg", "ibv_create_qp", "ibv_create_cq", "ibv_alloc_pd", "ibv_post"} {
			l.Fatal = l.Fatal || hasPrefix(l.Detail, v)
		}
		if d := (scanner{b: m}); d.skipTo("on dev ") {
			w := d.word()
			w = bytes.TrimRight(w, ",")
			if c := bytes.LastIndexByte(w, ':'); c > 0 {
				l.Dev2 = w[:c]
				l.Port, _ = atoi(w[c+1:])
			} else {
				l.Dev2 = w
			}
		}
		if r := (scanner{b: m}); r.skipTo("failed with error ") {
			l.Text = trimSpace(r.rest())
		} else if r.skipTo("failed with ") {
			l.Text = trimSpace(r.rest())
		}
	case contains(m, "Unable to open device"):
		// One HCA NCCL cannot open; the others may carry the job.
		l.Detail = bytesOf("open")
		if d := (scanner{b: m}); d.skipTo("Unable to open device ") {
			l.Dev2 = d.word()
		}
	default:
		l.Detail = m
		l.Fatal = true
	}
}

// parseCudaFailure reads "Cuda failure 'out of memory'" and 2.30.7's "Cuda failure 2 'out
// of memory'" (also written unquoted by some builds).
func parseCudaFailure(l *Line) {
	m := l.Msg
	l.Kind = KindCudaError
	l.Fatal = true
	s := scanner{b: m}
	s.skipTo("failure") // "Cuda failure", "CUDA failure", RCCL's "HIP failure"
	s.space()
	if n, ok := s.int(); ok {
		l.Code = n
		s.space()
	}
	r := trimSpace(s.rest())
	if len(r) > 0 && r[0] == '\'' {
		r = r[1:]
		if e := bytes.IndexByte(r, '\''); e >= 0 {
			r = r[:e]
		}
	}
	l.Detail = r
}

// parseRankConflict reads the bootstrap root's complaints about the ranks that check in:
// "Bootstrap Root : rank 1 of 8 ranks has already checked in" and "Bootstrap Root : mismatch
// in rank count from procs 8 : 16".
func parseRankConflict(l *Line) {
	m := l.Msg
	l.Kind = KindRankConflict
	l.Fatal = true
	l.Ranks = [2]int{-1, -1}
	s := scanner{b: m}
	if s.skipTo("Root : rank ") {
		l.Ranks[0], _ = s.int()
		if s.lit(" of ") {
			l.Code, _ = s.int()
		}
		return
	}
	if s.skipTo("from procs ") {
		start := s.i
		a, ok1 := s.int()
		s.lit(" : ")
		b, ok2 := s.int()
		if ok1 && ok2 {
			l.Code = max(a, b)
			l.Detail = m[start:s.i]
		}
	}
}

// parseProxyFailure reads the proxy's errors and the ranks they name: "Proxy Call to rank 9
// failed (Connect)", "[Proxy Service 9] Failed to execute operation Connect from rank 9,
// retcode 2", "[Service thread] Error encountered progressing operation=Connect, res=2".
func parseProxyFailure(l *Line) {
	m := l.Msg
	l.Kind = KindProxyError
	l.Ranks = [2]int{-1, -1}
	l.Rank = -1
	if hasPrefix(m, "[Proxy Service ") {
		// The proxy's own rank (see OwnRank).
		s := scanner{b: m, i: len("[Proxy Service ")}
		if r, ok := s.int(); ok && s.lit("]") {
			l.Rank = r
		}
	}
	s := scanner{b: m}
	switch {
	case s.skipTo("Call to rank "):
		l.Ranks[0], _ = s.int()
		if s.skipTo("(") {
			w := s.rest()
			if e := bytes.IndexByte(w, ')'); e >= 0 {
				l.Detail = w[:e]
			}
		}
	case s.skipTo("operation "):
		l.Detail = s.word()
		if s.skipTo("from rank ") {
			if r, ok := s.int(); ok {
				l.Ranks[0] = r
			}
		}
		if s.skipTo("retcode ") {
			l.Code, _ = s.int()
		}
	case s.skipTo("operation="):
		w := s.word()
		l.Detail = bytes.TrimRight(w, ",")
		if s.skipTo("res=") {
			l.Code, _ = s.int()
		}
	case s.skipTo("tpRank "):
		l.Ranks[0], _ = s.int()
	}
}

// isIPCFailure reports the P2P transport's failures to share GPU memory between processes:
// "failed to open CUDA IPC handle : 64 peer access is not supported between these two
// devices" (NCCL 2.3-2.5), RCCL's "hipIpcGetMemHandle failed : invalid argument",
// "cudaIpcOpenMemHandle failed".
func isIPCFailure(m []byte) bool {
	return contains(m, "IPC handle") || contains(m, "IpcGetMemHandle") || contains(m, "IpcOpenMemHandle")
}

// parseIPCFailure reads the reason after " : ", with the CUDA error number before it when
// NCCL printed one ("64 peer access is not supported ...").
func parseIPCFailure(l *Line) {
	l.Kind = KindP2PError
	l.Fatal = true
	r := reasonAfter(l.Msg)
	s := scanner{b: r}
	if n, ok := s.int(); ok && s.space() {
		l.Code = n
		r = s.rest()
	}
	l.Detail = r
}

// parseOFIFailure reads the AWS OFI NCCL plugin's WARNs ("NET/OFI ..."): "Request 0x.. [seq N]
// completed with error. RC: 113. Error: 2 (UNDELIVERABLE). Completed length: 0[, Request:
// ..]", the older "RC: 5. Error: Input/output error. Completed length: 0", "Unable to read
// from fi_cq_readerr. RC: -5. Error: ...". A failed completion is a transfer the fabric
// could not carry; the plugin's other WARNs (probing providers at start) may be followed by
// NCCL using another network, and count only when PyTorch quotes them as its last error.
func parseOFIFailure(l *Line) {
	m := l.Msg
	l.Kind = KindNetError
	l.Fatal = l.Quoted || contains(m, "completed with error") || contains(m, "fi_cq_readerr") ||
		contains(m, "completion queue")
	s := scanner{b: m}
	if s.skipTo("RC: ") {
		l.Code, _ = s.int()
	}
	if !s.skipTo("Error: ") {
		return
	}
	r := s.rest()
	if e := index(r, ". Completed"); e >= 0 {
		r = r[:e]
	}
	// "2 (UNDELIVERABLE)": the provider's number, then its name.
	if o := bytes.IndexByte(r, '('); o >= 0 && o < 8 {
		if c := bytes.IndexByte(r[o:], ')'); c > 1 {
			r = r[o+1 : o+c]
		}
	}
	l.Detail = bytes.TrimRight(trimSpace(r), ".")
}

// isCollNetWarn reports a WARN of CollNet's set-up: NCCL's own ("Cannot initialize CollNet,
// using point-to-point network instead") or its SHARP plugin's
// (sharp_plugin.c: "NET/IB : SHARP coll init error: ...", "SHARP group create: ...").
func isCollNetWarn(l *Line) bool {
	return contains(l.Msg, "CollNet") || contains(l.Msg, "SHARP") || contains(l.File, "sharp")
}

func parseCollNetWarn(l *Line) {
	l.Code = snapshot.WarnCollNet
	if contains(l.Msg, "using point-to-point network instead") {
		l.Code = snapshot.WarnCollNetFallback
	}
	l.Detail = reasonAfter(l.Msg)
}

// parseSignal reads UCX's report of a fatal signal, "[host:pid :thread:tid] Caught signal 7
// (Bus error: nonexistent physical address)" (UCX pads the pid), and a frame of the backtrace
// it prints next that is NCCL's (" 1 0x000000000008170d ncclGroupEnd()  ???:0"), which says
// the signal came inside NCCL.
func parseSignal(b []byte, l *Line) bool {
	l.Torch.Rank = -1
	if len(b) > 0 && b[0] == '[' {
		return caughtSignal(b, l)
	}
	t := trimSpace(b)
	s := scanner{b: t}
	if _, ok := s.int(); !ok || !s.space() || !s.lit("0x") {
		return false
	}
	if _, ok := s.hex(); !ok || !s.space() {
		return false
	}
	fn := s.word()
	if !hasPrefix(fn, "nccl") && !contains(fn, "libnccl") {
		return false
	}
	l.Kind = KindSignal
	l.Msg, l.Text = t, fn
	return true
}

func caughtSignal(b []byte, l *Line) bool {
	end := index(b, "] Caught signal ")
	if end < 0 {
		return false
	}
	inner := b[1:end]
	c := bytes.IndexByte(inner, ':')
	if c <= 0 {
		return false
	}
	pidText := inner[c+1:]
	if e := bytes.IndexByte(pidText, ':'); e >= 0 {
		pidText = pidText[:e]
	}
	pid, ok := atoi(trimSpace(pidText))
	s := scanner{b: b, i: end + len("] Caught signal ")}
	sig, ok2 := s.int()
	if !ok || !ok2 {
		return false
	}
	l.Kind = KindSignal
	l.Code, l.Fatal = sig, true
	l.Torch.Host, l.Torch.PID = inner[:c], pid
	l.Msg = b[end+2:]
	if s.space() && s.lit("(") {
		l.Detail = bytes.TrimSuffix(s.rest(), bytesOf(")"))
	}
	return true
}
