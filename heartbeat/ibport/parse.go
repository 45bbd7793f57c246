package ibport

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseRate parses an InfiniBand port's sysfs rate as the kernel prints it,
// "%d%s Gb/sec (%dX%s)": "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)", and, from kernels
// that printed no name for SDR, "10 Gb/sec (4X)". The width ("4X") and speed ("NDR") are
// returned as printed; either is empty when the kernel printed none.
func ParseRate(s string) (gbps float64, width, speed string, err error) {
	s = strings.TrimSpace(s)
	num, rest, ok := strings.Cut(s, " ")
	if !ok {
		return 0, "", "", fmt.Errorf("rate %q: want \"<n> Gb/sec (<w>X <speed>)\"", s)
	}
	if !isDecimal(num) {
		return 0, "", "", fmt.Errorf("rate %q: %q is not a decimal number", s, num)
	}
	gbps, err = strconv.ParseFloat(num, 64)
	if err != nil || math.IsInf(gbps, 0) {
		return 0, "", "", fmt.Errorf("rate %q: bad number %q", s, num)
	}
	rest, ok = strings.CutPrefix(strings.TrimLeft(rest, " "), "Gb/sec")
	if !ok {
		return 0, "", "", fmt.Errorf("rate %q: unit is not Gb/sec", s)
	}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return gbps, "", "", nil
	}
	inner, ok := strings.CutPrefix(rest, "(")
	if ok {
		inner, ok = strings.CutSuffix(inner, ")")
	}
	if !ok {
		return 0, "", "", fmt.Errorf("rate %q: want \"(<w>X <speed>)\" after the unit", s)
	}
	width, speed, _ = strings.Cut(strings.TrimSpace(inner), " ")
	speed = strings.TrimSpace(speed)
	if !isWidth(width) {
		return 0, "", "", fmt.Errorf("rate %q: bad link width %q", s, width)
	}
	if speed != "" && !isAlnum(speed) {
		return 0, "", "", fmt.Errorf("rate %q: bad link speed %q", s, speed)
	}
	return gbps, width, speed, nil
}

// ParseState parses an InfiniBand state or phys_state file, "<n>: <name>" ("4: ACTIVE",
// "5: LinkUp", "7: Phy Test"), and returns the name.
func ParseState(s string) (string, error) {
	s = strings.TrimSpace(s)
	num, name, ok := strings.Cut(s, ":")
	if !ok || !isDigits(num) {
		return "", fmt.Errorf("state %q: want \"<n>: <name>\"", s)
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return "", fmt.Errorf("state %q: no name", s)
	}
	return name, nil
}

// errNotAvailable marks a counter the driver cannot provide; the kernel prints
// "N/A (no PMA)" for ports without a performance management agent.
var errNotAvailable = errors.New("counter not available")

// parseCounter parses a sysfs counter value: decimal digits, surrounding space allowed.
// It works on the read buffer so a sample allocates nothing per counter.
func parseCounter(b []byte) (uint64, error) {
	b = trimSpace(b)
	if len(b) == 0 {
		return 0, errors.New("empty counter")
	}
	if b[0] == 'N' && len(b) >= 3 && string(b[:3]) == "N/A" {
		return 0, errNotAvailable
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("counter %q is not a decimal number", b)
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, fmt.Errorf("counter %q overflows 64 bits", b)
		}
		v = v*10 + d
	}
	return v, nil
}

// parseSpeedMbps parses a net interface's speed file. The kernel prints -1 (SPEED_UNKNOWN)
// when the link is down; that and any other negative value mean unknown (0).
func parseSpeedMbps(b []byte) (uint64, error) {
	b = trimSpace(b)
	if len(b) > 1 && b[0] == '-' {
		if _, err := parseCounter(b[1:]); err != nil {
			return 0, fmt.Errorf("speed %q is not an integer", b)
		}
		return 0, nil
	}
	v, err := parseCounter(b)
	if err != nil {
		return 0, fmt.Errorf("speed %q is not an integer", b)
	}
	return v, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isDecimal accepts "400" and "2.5", not exponents, signs or hex floats.
func isDecimal(s string) bool {
	whole, frac, dot := strings.Cut(s, ".")
	return isDigits(whole) && (!dot || isDigits(frac))
}

// isWidth accepts the kernel's "%dX": "1X", "4X", "12X".
func isWidth(s string) bool {
	n, ok := strings.CutSuffix(s, "X")
	return ok && isDigits(n)
}

func isAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}
