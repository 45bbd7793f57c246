package logparse

import (
	"bytes"

	"github.com/ncclwatch/watchdog/snapshot"
)

// parseMessage classifies the message of a prefixed NCCL line.
func parseMessage(l *Line) {
	m := l.Msg
	if l.Level == LevelWarn {
		parseWarn(l)
		return
	}
	l.Kind = KindInfo
	if len(m) == 0 || l.Level != LevelInfo {
		return
	}
	// The per-op line is by far the most frequent: test it first and cheaply; then the
	// channel lines, hundreds per communicator at start-up and at every lazy connection.
	if hasPrefix(m, "Channel ") {
		parseChannel(l)
		return
	}
	if c := indexByte16(m, 0, ':'); c > 0 {
		if hasPrefix(m[c:], ": opCount ") {
			if hotColl(m, l) {
				l.Kind = KindColl
			}
			return
		}
		if c+2 < len(m) && m[c+1] == ' ' && isDigit(m[c+2]) && contains(m[c:], " Bytes -> ") {
			l.Kind = KindTuning
			return
		}
	}
	if isTuning(m) {
		l.Kind = KindTuning
		return
	}
	switch m[0] {
	case 'C':
		if hasPrefix(m, "CollNet ") {
			s := scanner{b: m}
			if s.skipTo(" via ") {
				l.Kind = KindChannel
				l.Channel.ProxyRank = -1
				l.Channel.Transport = s.rest()
				l.Channel.Send = contains(m, "[send]")
				l.Channel.Recv = contains(m, "[receive]")
			}
			return
		}
	case 'U':
		if hasPrefix(m, "Using network ") {
			l.Kind = KindUsingNetwork
			l.Text = m[len("Using network "):]
			return
		}
	case 'N':
		if hasPrefix(m, "NCCL version ") {
			l.Kind = KindVersion
			l.Text = versionText(m)
			return
		}
		if hasPrefix(m, "NET/IB : Using") || hasPrefix(m, "NET/IB: Using") {
			l.Kind = KindNetIBDevices
			l.Text = deviceList(m)
			return
		}
		if hasPrefix(m, "NET/IB : No device found") {
			l.Kind = KindNetIBNone
			return
		}
		if hasPrefix(m, "NET : Using interface ") {
			// NCCL 2.1-2.3: the interface its sockets (bootstrap included) use.
			l.Kind = KindBootstrap
			l.Text = trimSpace(m[len("NET : Using interface "):])
			return
		}
		if hasPrefix(m, "NET/Socket : Using") {
			l.Kind = KindNetSocketDevices
			l.Text = deviceList(m)
			return
		}
		if hasPrefix(m, "NET/IB") && contains(m, "Got completion") {
			parseIBCompletion(l)
			return
		}
		if hasPrefix(m, "NET/Plugin") {
			parseNetPlugin(l)
			return
		}
	case 'F':
		if hasPrefix(m, "Failed to initialize NET plugin ") {
			parseNetPlugin(l)
			return
		}
	case 'B':
		if hasPrefix(m, "Bootstrap: Using") || hasPrefix(m, "Bootstrap : Using") {
			l.Kind = KindBootstrap
			l.Text = trimSpace(m[bytes.Index(m, bytesOf("Using"))+len("Using"):])
			return
		}
	case 'R':
		if hasPrefix(m, "RCCL version ") {
			l.Kind = KindVersion
			l.Text = versionText(m)
			return
		}
		if hasPrefix(m, "RAS declaring peer ") {
			l.Kind = KindRASPeerDead
			s := scanner{b: m, i: len("RAS declaring peer ")}
			l.Text = s.word()
			return
		}
	case '[':
		if hasPrefix(m, "[Service thread] Connection closed by localRank ") {
			s := scanner{b: m, i: len("[Service thread] Connection closed by localRank ")}
			if r, ok := s.int(); ok {
				l.Kind = KindConnClosedLocal
				l.LocalRk = r
			}
			return
		}
		if hasPrefix(m, "[Rank ") && hasSuffix(m, " Init START") {
			parseInit(l)
			return
		}
	}
	if hasSuffix(m, "Init START") || hasSuffix(m, "Init COMPLETE") {
		parseInit(l)
		return
	}
	if isDigit(m[0]) && parseOldChannel(l) {
		return
	}
	if hasPrefix(m, "comm 0x") {
		if parseCommInfo(l) {
			return
		}
		parseDestroy(l)
		return
	}
	if contains(m, "Connection closed by remote peer ") {
		parseConnClosedRemote(l)
		return
	}
	if contains(m, "onnect") && contains(m, "retrying") {
		// "Call to connect returned Connection refused, retrying": a peer not listening
		// yet. Harmless alone; the one that ends in a WARN is the failure.
		parseConnectFailure(l, false)
		return
	}
	parseBreadcrumb(l)
}

// closingBracket is the index of the first ']' at or after m[j], or -1.
func closingBracket(m []byte, j int) int {
	if k := indexByte16(m, j, ']'); k >= 0 {
		return j + k
	}
	if k := bytes.IndexByte(m[j:], ']'); k >= 0 {
		return j + k
	}
	return -1
}

// isTuning recognises the rank-0 tuning lines of every version: "%ld Bytes -> Algo" (2.20),
// "<Op>: %ld Bytes -> ..." (2.23+), "<Op> [Symmetric]: ...", "<Op> [Copy Engine]: ...".
func isTuning(m []byte) bool {
	// Cheap test first: the line starts with digits or an op name (most INFO lines do not).
	if !isDigit(m[0]) {
		sp := bytes.IndexAny(m[:min(len(m), 16)], ": ")
		if sp <= 0 || ParseOpName(m[:sp]) == OpUnknown {
			return false
		}
	}
	i := index(m, " Bytes -> ")
	return i > 0 && i <= 64
}

// parseInit reads every Init START/COMPLETE form: 2.18-2.30, and the older ones without
// commId (2.10: "... cudaDev 2 busId 89000 - Init COMPLETE"), without busId (2.4:
// "... cudaDev 1 nvmlDev 1 - Init COMPLETE") or with fields of their own (RCCL). Fields
// are read by name; an unknown "name value" pair is skipped.
func parseInit(l *Line) {
	m := l.Msg
	in := &l.Init
	in.JobRank, in.SplitCount, in.CudaDev, in.NvmlDev = -1, -1, -1, -1
	s := scanner{b: m}
	if s.lit("[Rank ") {
		r, ok := s.int()
		if !ok || !s.lit("] ") {
			return
		}
		in.JobRank = r
	}
	if hasPrefix(s.rest(), "nccl") {
		in.API = s.word()
		if !s.space() {
			return
		}
	}
	var ok bool
	if !s.lit("comm ") {
		return
	}
	if in.Comm, ok = s.ptr(); !ok || !s.space() {
		return
	}
	haveRank, haveN := false, false
	for n := 0; n < 16; n++ {
		rest := s.rest()
		switch {
		case hasPrefix(rest, "- Init START"):
			l.Phase = PhaseInitStart
		case hasPrefix(rest, "- Init COMPLETE"):
			l.Phase = PhaseInitComplete
		}
		if l.Phase != PhaseNone {
			if !haveRank || !haveN {
				l.Phase = PhaseNone
				return
			}
			l.Kind = KindInit
			l.Comm = in.Comm
			return
		}
		name := s.word()
		if len(name) == 0 || !s.space() {
			return
		}
		ok = true
		switch string(name) {
		case "rank":
			in.Rank, haveRank = s.int()
		case "nranks":
			in.NRanks, haveN = s.int()
		case "cudaDev":
			in.CudaDev, ok = s.int()
		case "nvmlDev":
			in.NvmlDev, ok = s.int()
		case "busId":
			in.BusID, ok = s.hex()
		case "parent":
			in.IsSplit = true
			in.Parent, ok = s.ptr()
		case "splitCount", "childCount":
			in.SplitCount, ok = s.int()
		case "color":
			in.Color, ok = s.int()
		case "key":
			in.Key, ok = s.int()
		case "commId":
			if ok = s.lit("0x"); ok {
				in.CommID, ok = s.hex()
				in.HasCommID = ok
			}
		default:
			// A bare word ("bytes" in RCCL's "used N bytes") has no value to skip.
			if !hasPrefix(s.rest(), "- Init ") {
				ok = len(s.word()) > 0
			} else {
				continue
			}
		}
		if name := string(name); (name == "rank" && !haveRank) || (name == "nranks" && !haveN) || !ok {
			return
		}
		// 2.23+ START prints "key %d- Init START".
		if !s.space() && !hasPrefix(s.rest(), "- Init ") {
			return
		}
	}
}

// parseCommInfo reads "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d".
func parseCommInfo(l *Line) bool {
	s := scanner{b: l.Msg, i: len("comm ")}
	comm, ok := s.ptr()
	if !ok || !s.space() {
		return false
	}
	rank, ok := s.field("rank")
	if !ok || !s.space() {
		return false
	}
	nr, ok := s.field("nRanks")
	if !ok || !s.space() {
		return false
	}
	nn, ok := s.field("nNodes")
	if !ok || !s.space() {
		return false
	}
	if _, ok = s.field("localRanks"); !ok || !s.space() {
		return false
	}
	lr, ok := s.field("localRank")
	if !ok {
		return false
	}
	l.Kind = KindCommInfo
	l.Comm, l.Rank, l.NRanks, l.NNodes, l.LocalRk = comm, int(rank), int(nr), int(nn), int(lr)
	return true
}

// parseDestroy reads "comm %p rank %d nranks|nRanks %d cudaDev %d busId %lx - <What> <PHASE>".
func parseDestroy(l *Line) {
	m := l.Msg
	s := scanner{b: m, i: len("comm ")}
	comm, ok := s.ptr()
	if !ok || !s.space() {
		return
	}
	rank, ok := s.field("rank")
	if !ok || !s.space() {
		return
	}
	if !s.lit("nranks ") && !s.lit("nRanks ") {
		return
	}
	nr, ok := s.dec()
	if !ok || !s.skipTo(" - ") {
		return
	}
	rest := s.rest()
	switch {
	case hasPrefix(rest, "Destroy COMPLETE"):
		l.Phase = PhaseDestroy
	case hasPrefix(rest, "Abort START"):
		l.Phase = PhaseAbortStart
	case hasPrefix(rest, "Abort COMPLETE"):
		l.Phase = PhaseAbort
	case hasPrefix(rest, "Revoke START"):
		l.Phase = PhaseRevokeStart
	case hasPrefix(rest, "Revoke COMPLETE"):
		l.Phase = PhaseRevoke
	default:
		return
	}
	l.Kind = KindDestroy
	l.Comm, l.Rank, l.NRanks = comm, int(rank), int(nr)
}

// parseChannel reads the P2P, SHM and NET channel lines and recognises the ring dump.
func parseChannel(l *Line) {
	m := l.Msg
	ch := &l.Channel
	ch.ProxyRank = -1
	v, j, ok := hotInt(m, len("Channel "))
	if !ok {
		return
	}
	ch.Channel = int(v)
	// A communicator prints one line per channel, alike but for the channel number.
	cc := &l.prefixes().channel
	if rest := m[j:]; cc.n > 0 && len(rest) == cc.n && equalAt(rest, 0, cc.text[:], cc.n) {
		cc.apply(l, j)
		return
	}
	parseChannelRest(l, j)
	if l.Kind == KindChannel && len(m)-j <= len(cc.text) {
		cc.remember(l, j)
	}
}

// channelCache remembers a channel line's text after the channel number, with what was
// read from it; slices are kept as offsets into that text.
type channelCache struct {
	text          [64]byte
	n             int
	ch            Channel
	transportAt   int
	netAt, netLen int
}

func (c *channelCache) remember(l *Line, j int) {
	m := l.Msg
	c.n = copy(c.text[:], m[j:])
	c.ch = l.Channel
	c.ch.Transport, c.ch.Net = nil, nil
	c.transportAt = len(m) - len(l.Channel.Transport) - j
	c.netAt, c.netLen = c.transportAt+len("NET/"), len(l.Channel.Net)
}

func (c *channelCache) apply(l *Line, j int) {
	m := l.Msg
	ch := c.ch
	ch.Channel = l.Channel.Channel
	ch.Transport = m[j+c.transportAt:]
	if c.netLen > 0 {
		ch.Net = m[j+c.netAt : j+c.netAt+c.netLen]
	}
	l.Channel = ch
	l.Kind = KindChannel
}

// parseChannelRest reads a channel line from after its channel number, at m[j:].
func parseChannelRest(l *Line, j int) {
	m := l.Msg
	ch := &l.Channel
	var ok bool
	var v int64
	if j < len(m) && m[j] == '/' {
		if _, j, ok = hotInt(m, j+1); !ok {
			return
		}
	}
	if j+3 > len(m) || string(m[j:j+3]) != " : " {
		return
	}
	if v, j, ok = hotInt(m, j+3); !ok {
		return
	}
	ch.From = int(v)
	if j >= len(m) || m[j] != '[' {
		// "Channel 00/24 :    0   1": the rank-0 ring dump.
		l.Kind = KindRing
		return
	}
	// "[<dev or busId>] -> "
	k := closingBracket(m, j)
	if k < 0 || k+5 > len(m) || string(m[k:k+5]) != "] -> " {
		return
	}
	if v, j, ok = hotInt(m, k+5); !ok {
		return
	}
	ch.To = int(v)
	if k = closingBracket(m, j); k < 0 || k+2 > len(m) || m[k+1] != ' ' {
		return
	}
	s := scanner{b: m, i: k + 2}
	if s.lit("[send] ") {
		ch.Send = true
	} else if s.lit("[receive] ") {
		ch.Recv = true
	}
	if !s.lit("via ") {
		return
	}
	ch.Transport = s.rest()
	l.Kind = KindChannel
	if !hasPrefix(ch.Transport, "NET/") {
		return
	}
	// NET/<name>/<dev>[(<proxy>)][/GDRDMA][(PCI)][/Shared]; the name may contain spaces.
	t := ch.Transport[len("NET/"):]
	for i := 0; i < len(t); i++ {
		if t[i] != '/' || i+1 >= len(t) || !isDigit(t[i+1]) {
			continue
		}
		j := i + 1
		for j < len(t) && isDigit(t[j]) {
			j++
		}
		if j < len(t) && t[j] != '(' && t[j] != '/' && t[j] != ' ' {
			continue
		}
		ch.Net = t[:i]
		ch.NetDev, _ = atoi(t[i+1 : j])
		tail := t[j:]
		if len(tail) > 0 && tail[0] == '(' && !hasPrefix(tail, "(PCI)") {
			ps := scanner{b: tail, i: 1}
			if p, ok := ps.int(); ok {
				ch.ProxyRank = p
			}
		}
		ch.GDR = contains(tail, "/GDRDMA")
		return
	}
}

// deviceList returns the text between "Using" and "; OOB" (or the end).
func deviceList(m []byte) []byte {
	i := bytes.Index(m, bytesOf("Using"))
	if i < 0 {
		return nil
	}
	rest := m[i+len("Using"):]
	if j := bytes.IndexByte(rest, ';'); j >= 0 {
		rest = rest[:j]
	}
	return trimSpace(rest)
}

// parseWarn classifies a WARN by family.
func parseWarn(l *Line) {
	m := l.Msg
	l.Kind = KindWarn
	switch {
	case hasPrefix(m, "Mismatched collective detected") || contains(m, "may be caused by a collective mismatch"):
		l.Kind = KindCollMismatch
		l.Fatal = hasPrefix(m, "Mismatched")
		s := scanner{b: m}
		if s.skipTo("around rank ") || s.skipTo("around this rank ") {
			l.Code, _ = s.int()
		}
	case hasPrefix(m, "Invalid rank requested"):
		parseInvalidRank(l)
	case hasPrefix(m, "Error: network ") && contains(m, " not found"):
		parseNetNotFound(l)
	case hasPrefix(m, "NET/Plugin") || hasPrefix(m, "Failed to initialize NET plugin "):
		parseNetPlugin(l)
		if l.Kind == KindInfo {
			l.Kind = KindWarn
		}
	case hasPrefix(m, "nvmlDeviceGetHandleByPciBusId") && contains(m, "failed"):
		// NVML could not find the GPU by the bus id CUDA reported: the two see different
		// devices (a container's NVML, CUDA_VISIBLE_DEVICES that NVML does not follow).
		l.Code = snapshot.WarnNVMLMissing
		l.Fatal = true
		l.Detail = reasonAfter(m)
	case hasPrefix(m, "NET/") && (contains(m, "collective mismatch error") || contains(m, "posted incorrect receive info")):
		l.Kind = KindNetSizeMismatch
		s := scanner{b: m}
		if s.skipTo(" peer ") {
			l.Text = s.word()
		}
	case hasPrefix(m, "NET/IB") && contains(m, "Got completion"):
		parseIBCompletion(l)
	case hasPrefix(m, "NET/IB") && (contains(m, "Unable to open device") || contains(m, "incompatible devices")):
		parseIBSetup(l)
	case hasPrefix(m, "NET/IB") && (contains(m, "async") || contains(m, "event") || contains(m, "GID table")):
		parseIBAsync(l)
	case hasPrefix(m, "Call to ibv_") || hasPrefix(m, "Call to ibv"):
		parseIBSetup(l)
	case hasPrefix(m, "NET/OFI "):
		parseOFIFailure(l)
	case isIPCFailure(m):
		parseIPCFailure(l)
	case hasPrefix(m, "[Rem Allocator]"):
		// NCCL before 2.12: the bootstrap's remote-allocator service, which any connection
		// to its port reaches; the rules judge it with what came before it.
		l.Code = snapshot.WarnRemAllocator
	case contains(m, "Connection closed by localRank ") || contains(m, "Could not receive type from localRank "):
		// "[Service thread] Could not receive type from localRank 3, res=3, closed=1": the
		// proxy lost a local peer mid-message, which it also only does when that peer died.
		s := scanner{b: m}
		if !s.skipTo("Connection closed by localRank ") {
			s.skipTo("from localRank ")
		}
		if r, ok := s.int(); ok {
			l.Kind = KindConnClosedLocal
			l.LocalRk = r
		}
	case hasPrefix(m, "Bootstrap Root : ") && (contains(m, "has already checked in") || contains(m, "mismatch in rank count")):
		parseRankConflict(l)
	case isShmFailure(m):
		parseShmFailure(l)
	case isSocketFailure(m):
		parseSocketFailure(l)
	case contains(m, "Connection closed by remote peer "):
		parseConnClosedRemote(l)
	case contains(m, "from localRank -1"):
		// "[Service thread] Unknown command 66326 from localRank -1": something that is not
		// a rank (a port scanner, a stray client) connected to the proxy's socket, which
		// drops it: a plain WARN, no failure of the job.
	case hasPrefix(m, "[Service thread]") || hasPrefix(m, "[Proxy Service") ||
		hasPrefix(m, "ncclProxyCallBlockingUDS") || hasPrefix(m, "Socket recv failed while polling") ||
		hasPrefix(m, "hostStreamPlanCallback") || (hasPrefix(m, "Comm 0x") && contains(m, "abort state")) ||
		hasPrefix(m, "proxy") || hasPrefix(m, "Proxy"):
		parseProxyFailure(l)
	case hasPrefix(m, "Cuda failure") || hasPrefix(m, "CUDA failure") || hasPrefix(m, "HIP failure"):
		parseCudaFailure(l)
	case hasPrefix(m, "Duplicate GPU detected") || hasPrefix(m, "Multiple Ranks are using the same GPU"):
		parseTwoRanks(l, KindDuplicateGPU)
	case hasPrefix(m, "Mismatched NCCL version"):
		parseTwoRanks(l, KindVersionMismatch)
	case isCollNetWarn(l):
		parseCollNetWarn(l)
	case hasPrefix(m, "Call to ") || contains(m, "communicator encountered a fatal error") ||
		hasPrefix(m, "ncclCommSetAsyncError") || hasPrefix(m, "commReclaim") || hasPrefix(m, "Error : ring"):
		l.Kind = KindSystemError
		// A ring that does not close is a topology NCCL cannot run on, not a passing error.
		l.Fatal = contains(m, "fatal") || hasPrefix(m, "Error : ring")
		l.Detail = reasonAfter(m)
	}
}

// parseIBCompletion reads every version of the IB completion-error WARN:
// "NET/IB( : |: |/GIN: )Got completion from peer P with (error N,|status=[NAME(]N[)]) opcode[= ]...",
// and the peerless "NET/IB : Got completion with error N, opcode ..." of NCCL before 2.7.
func parseIBCompletion(l *Line) {
	m := l.Msg
	s := scanner{b: m}
	if !s.skipTo("Got completion ") {
		return
	}
	l.Kind = KindIBCompletion
	l.Fatal = true
	if s.lit("from peer ") {
		l.Text = s.peer()
		s.space()
	}
	if !s.lit("with ") {
		return
	}
	if s.lit("error ") {
		l.Code, _ = s.int()
	} else if s.lit("status=") {
		if s.i < len(s.b) && !isDigit(s.b[s.i]) {
			if !s.skipTo("(") {
				return
			}
		}
		l.Code, _ = s.int()
	}
	// The request that failed: "(Send)" before 2.28.7, "req_type=Send" after.
	for _, rt := range []string{"Send", "Recv", "Flush", "IPut"} {
		if i := index(m, rt); i > 0 && (m[i-1] == '(' || m[i-1] == '=') {
			l.Detail = m[i : i+len(rt)]
			break
		}
	}
	if i := bytes.LastIndex(m, bytesOf(" hca ")); i >= 0 {
		hs := scanner{b: m, i: i + len(" hca ")}
		l.Dev2 = hs.word()
	}
}

// parseIBAsync reads "NET/IB : dev:port <event text>" in its version forms.
func parseIBAsync(l *Line) {
	m := l.Msg
	l.Kind = KindIBAsync
	s := scanner{b: m}
	if !s.lit("NET/IB : ") && !s.lit("NET/IB: ") {
		return
	}
	// 2.18-2.19: "NET/IB : Got async event : %s" has no device.
	if !hasPrefix(s.rest(), "Got async") {
		dp := s.word()
		if c := bytes.LastIndexByte(dp, ':'); c > 0 {
			l.Dev2 = dp[:c]
			l.Port, _ = atoi(dp[c+1:])
		}
		s.space()
	}
	rest := s.rest()
	l.Fatal = contains(rest, "fatal") && !contains(rest, "non-fatal")
	if c := bytes.LastIndex(rest, bytesOf(": ")); c >= 0 {
		l.Text = rest[c+2:]
	} else {
		l.Text = rest
	}
	// 2.29+ prints "port error(10)": keep the name only.
	if p := bytes.IndexByte(l.Text, '('); p > 0 && l.Text[len(l.Text)-1] == ')' {
		l.Code, _ = atoi(l.Text[p+1 : len(l.Text)-1])
		l.Text = trimSpace(l.Text[:p])
	}
}

func parseConnClosedRemote(l *Line) {
	s := scanner{b: l.Msg}
	s.skipTo("Connection closed by remote peer ")
	l.Kind = KindConnClosedRemote
	l.Text = s.peer()
	// NCCL warns of it when the connection was needed; at INFO it is an expected close.
	l.Fatal = l.Level == LevelWarn
}

// parseBreadcrumb reads "file.cc:123 -> 6", "file.cc:123 (func) -> 6 [Progress Thread]".
func parseBreadcrumb(l *Line) {
	m := l.Msg
	s := scanner{b: m}
	w := s.word()
	c := bytes.LastIndexByte(w, ':')
	if c <= 0 || (!contains(w[:c], ".cc") && !contains(w[:c], ".h") && !contains(w[:c], ".c")) {
		return
	}
	if _, ok := atoi(w[c+1:]); !ok || !s.space() {
		return
	}
	if hasPrefix(s.rest(), "(") {
		s.word()
		s.space()
	}
	if !s.lit("-> ") {
		return
	}
	code, ok := s.int()
	if !ok {
		return
	}
	l.Kind = KindBreadcrumb
	l.Code = code
	l.File = w[:c]
	l.FileLn, _ = atoi(w[c+1:])
	// The thread it ran on: "[Progress Thread]" (2.12+) and "[Proxy Thread]" (before) move
	// data for communicators already set up, so the error came after init.
	if rest := s.rest(); len(rest) > 2 && rest[len(rest)-1] == ']' {
		if o := bytes.LastIndexByte(rest, '['); o >= 0 {
			l.Text = rest[o+1 : len(rest)-1]
		}
	}
}

// ProgressThread reports a breadcrumb of NCCL's proxy progress thread, which only runs
// operations of initialized communicators.
func (l *Line) ProgressThread() bool {
	return l.Kind == KindBreadcrumb && (string(l.Text) == "Progress Thread" || string(l.Text) == "Proxy Thread")
}

// parseOldChannel reads NCCL 2.1-2.2's transport line, "1 -> 0 via P2P/IPC": one per ring
// neighbour, without a channel number.
func parseOldChannel(l *Line) bool {
	m := l.Msg
	s := scanner{b: m}
	from, ok1 := s.int()
	if !ok1 || !s.lit(" -> ") {
		return false
	}
	to, ok2 := s.int()
	if !ok2 || !s.lit(" via ") || s.i >= len(m) {
		return false
	}
	l.Kind = KindChannel
	l.Channel = Channel{From: from, To: to, Transport: s.rest(), ProxyRank: -1}
	return true
}
