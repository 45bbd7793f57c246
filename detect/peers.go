package detect

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
)

// peerBook names the remote ends NCCL's errors print: an address ("10.0.0.8<50123>",
// "fe80::1%ib0<33397>") or a host name ("node2.cluster<42830>"), by the addresses and host
// names the job's processes logged (bootstrap, NET/Socket, the NET/IB OOB interface).
type peerBook struct {
	byAddr map[string]string  // IP -> host
	hosts  map[string]bool    // host names as NCCL prints them (cut at the first '.')
	procs  map[string][]*Proc // host -> its processes
}

func newPeerBook(j *Job) *peerBook {
	b := &peerBook{byAddr: map[string]string{}, hosts: map[string]bool{}, procs: map[string][]*Proc{}}
	for _, p := range j.Procs {
		if p.Host == "" || p.Host == "?" {
			continue
		}
		b.hosts[p.Host] = true
		b.procs[p.Host] = append(b.procs[p.Host], p)
		for _, a := range p.Addrs {
			b.byAddr[peerIP(a)] = p.Host
		}
	}
	return b
}

// peerIP strips the "<port>" of "10.0.0.8<50123>" and an IPv6 zone ("%ib0").
func peerIP(peer string) string {
	if i := strings.IndexByte(peer, '<'); i >= 0 {
		peer = peer[:i]
	}
	if i := strings.IndexByte(peer, '%'); i >= 0 {
		peer = peer[:i]
	}
	return peer
}

// peerName is how to name a peer none of the job's logs came from: its address, or its
// host name cut at the first '.' as NCCL prints host names.
func peerName(peer string) string {
	ip := peerIP(peer)
	if net.ParseIP(ip) != nil {
		return ip
	}
	// A name's first label has a letter; "172...." or "10.x.x.x" is an address a poster
	// hid, kept as written rather than cut to "172".
	if i := strings.IndexByte(ip, '.'); i > 0 && hasLetter(ip[:i]) && !strings.Contains(ip, "..") {
		return ip[:i]
	}
	return ip
}

func hasLetter(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r|0x20 >= 'a' && r|0x20 <= 'z' }) >= 0
}

// host is the job's host behind an address or name, "" when none of its processes logged it.
func (b *peerBook) host(peer string) string {
	ip := peerIP(peer)
	if h := b.byAddr[ip]; h != "" {
		return h
	}
	if b.hosts[ip] {
		return ip
	}
	// NCCL prints its own host name cut at the first '.', a peer's in full.
	if i := strings.IndexByte(ip, '.'); i > 0 && b.hosts[ip[:i]] {
		return ip[:i]
	}
	return ""
}

// describe is "node8 (10.0.0.8<50123>)" when the peer is known, else the address.
func (b *peerBook) describe(peer string) string {
	if peer == "" {
		return "an unnamed peer"
	}
	if h := b.host(peer); h != "" && h != peerIP(peer) {
		return fmt.Sprintf("%s (%s)", h, peer)
	}
	return peer
}

// ranksOn lists the ranks of a host's processes, "" when none is known.
func (b *peerBook) ranksOn(host string) string {
	var rs []int
	for _, p := range b.procs[host] {
		if p.Rank >= 0 {
			rs = append(rs, p.Rank)
		}
	}
	if len(rs) == 0 {
		return ""
	}
	sort.Ints(rs)
	var s []string
	for _, r := range rs {
		s = append(s, strconv.Itoa(r))
	}
	if len(s) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ",")
}

// loopback reports an address no remote peer can be reached at: NCCL picked the wrong
// interface (lo, a docker bridge, an IPv6 link-local address).
func loopback(peer string) bool {
	ip := peerIP(peer)
	return strings.HasPrefix(ip, "127.") || ip == "::1" || strings.HasPrefix(ip, "fe80:") || strings.HasPrefix(ip, "172.17.")
}
