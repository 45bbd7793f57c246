package follow

import (
	"path/filepath"
	"strconv"
	"strings"
)

// ParseName returns the host and pid of a log named <prefix>.<host>.<pid>.log
// (NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log; any non-empty prefix is accepted).
// NCCL cuts %h at the first dot, so the host holds no dot; %p is printed with
// %d, so the pid has no sign and no leading zero. Only the base name counts.
func ParseName(path string) (host string, pid int, ok bool) {
	rest, found := strings.CutSuffix(filepath.Base(path), ".log")
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", 0, false
	}
	digits := rest[i+1:]
	if len(digits) == 0 || len(digits) > 10 || digits[0] == '0' {
		return "", 0, false
	}
	for j := 0; j < len(digits); j++ {
		if digits[j] < '0' || digits[j] > '9' {
			return "", 0, false
		}
	}
	p, err := strconv.ParseInt(digits, 10, 32)
	if err != nil {
		return "", 0, false
	}
	rest = rest[:i]
	j := strings.LastIndexByte(rest, '.')
	if j <= 0 || j == len(rest)-1 {
		return "", 0, false
	}
	return rest[j+1:], int(p), true
}
