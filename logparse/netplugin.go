package logparse

import (
	"bytes"

	"github.com/ncclwatch/watchdog/snapshot"
)

// defaultNetPlugin reports the library NCCL (or RCCL) looks for when no plugin is named:
// its absence is the normal case, not a failure.
func defaultNetPlugin(name []byte) bool {
	name = trimSpace(name)
	return string(name) == "libnccl-net.so" || string(name) == "librccl-net.so"
}

// notFound reports a loader's reason that says the library is not there.
func notFound(reason []byte) bool {
	return contains(reason, "No such file") || contains(reason, "cannot open shared object")
}

// parseNetPlugin reads NCCL's words on loading its network: a plugin library that failed to
// load ("NET/Plugin : Plugin load (libnccl-net-aws.so) returned 2 : <dlerror>" before 2.21;
// "NET/Plugin: Plugin load returned 2 : <dlerror> : when loading libnccl-net.so";
// "NET/Plugin: libnccl-net.so: ...: version `GLIBC_2.38' not found"; "Could not find: ofi
// libnccl-net-ofi.so" for a plugin NCCL_NET_PLUGIN names; "Failed to find ncclNetPlugin
// symbol (>= v5)"), and a network that did not initialize ("Failed to initialize NET plugin
// IB", 2.19+). The default plugin's absence and the probing of symbol versions are no event.
func parseNetPlugin(l *Line) {
	m := l.Msg
	l.Kind = KindInfo
	if hasPrefix(m, "Failed to initialize NET plugin ") {
		l.Kind = KindNetFallback
		l.Code = snapshot.NetPluginInit
		l.Detail = trimSpace(m[len("Failed to initialize NET plugin "):])
		return
	}
	body := trimSpace(bytes.TrimLeft(m[len("NET/Plugin"):], " :"))
	var name, reason []byte
	switch {
	case hasPrefix(body, "Plugin load ("):
		// ≤2.20: "Plugin load (NAME) returned N : REASON"
		rest := body[len("Plugin load ("):]
		c := bytes.IndexByte(rest, ')')
		if c < 0 {
			return
		}
		name = rest[:c]
		if i := index(rest, " : "); i >= 0 {
			reason = rest[i+3:]
		}
	case hasPrefix(body, "Plugin load returned "):
		// 2.21+: "Plugin load returned N : REASON : when loading NAME"
		rest := body[len("Plugin load returned "):]
		if i := index(rest, " : "); i >= 0 {
			reason = rest[i+3:]
		}
		if i := index(reason, " : when loading "); i >= 0 {
			name = reason[i+len(" : when loading "):]
			reason = reason[:i]
		}
	case hasPrefix(body, "Could not find:") || hasPrefix(body, "No plugin found ("):
		rest := body[len("Could not find:"):]
		if hasPrefix(body, "No plugin found (") {
			rest = body[len("No plugin found ("):]
			if c := bytes.IndexByte(rest, ')'); c >= 0 {
				rest = rest[:c]
			}
		}
		if i := index(rest, ". Using"); i >= 0 {
			rest = rest[:i]
		}
		name = bytes.TrimRight(trimSpace(rest), ".")
		reason = bytesOf("not found")
	case hasPrefix(body, "Failed to find ncclNetPlugin symbol") || hasPrefix(body, "Failed to find ncclCollNetPlugin symbol"):
		// No version it knows: the plugin is unusable (a probe of one version is not).
		name = body[len("Failed to find "):]
		if i := bytes.IndexByte(name, ' '); i > 0 {
			name = name[:i]
		}
		reason = body
	default:
		// "NET/Plugin: libnccl-net.so: <dlerror>": the library is there but did not load.
		c := index(body, ": ")
		if c <= 0 || !contains(body[:c], ".so") {
			return
		}
		name, reason = body[:c], body[c+2:]
	}
	reason = trimSpace(reason)
	if len(name) == 0 || (defaultNetPlugin(name) && (len(reason) == 0 || notFound(reason) || string(reason) == "not found")) {
		return
	}
	// The loader's message repeats the library's name first.
	reason = bytes.TrimPrefix(reason, append(append([]byte(nil), name...), ':', ' '))
	l.Kind = KindNetFallback
	l.Code = snapshot.NetPluginLoad
	l.Detail, l.Text = trimSpace(name), reason
}

// parseNetNotFound reads "Error: network AWS Libfabric not found.": NCCL_NET names a network
// no plugin provides, and the communicator fails.
func parseNetNotFound(l *Line) {
	m := bytes.TrimRight(l.Msg, ". ")
	l.Kind = KindNetFallback
	l.Code = snapshot.NetNotFound
	l.Fatal = true
	l.Detail = trimSpace(bytes.TrimSuffix(m[len("Error: network "):], bytesOf("not found")))
}

// parseInvalidRank reads "Invalid rank requested : 4/4" (init.cc).
func parseInvalidRank(l *Line) {
	l.Kind = KindInvalidRank
	l.Fatal = true
	s := scanner{b: l.Msg}
	if !s.skipTo(": ") {
		return
	}
	start := s.i
	if r, ok := s.int(); ok {
		l.Code = r
		if s.lit("/") {
			if _, ok := s.int(); ok {
				l.Detail = l.Msg[start:s.i]
			}
		}
	}
}
