package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// PackBusID converts a PCI bus id as NVML, CUDA or lspci print it ("00000000:1B:00.0",
// "0000:1b:00.0", "1b:00.0") to the form NCCL prints as `busId %lx` in its Init lines
// ("1b000"), so a GPU sample joins the rank that uses it.
//
// NCCL's busIdToInt64 drops ':' and '.', reads the remaining hex digits as one number and
// prints it in lower-case hex: the domain lands above bit 20 and vanishes when zero, and
// bus 00, device 06, function 0 becomes "60". NCCL reads whatever it is given; PackBusID
// accepts only [domain:]bus:device.function with a domain of up to 8 hex digits and the
// usual 2, 2 and 1 digits for the rest, so garbage is an error, not a wrong join key.
func PackBusID(busID string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("pci bus id %q: %s, want [domain:]bus:device.function", busID, why)
	}
	parts := strings.Split(busID, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return bad("wrong number of ':'")
	}
	domain := "0"
	if len(parts) == 3 {
		domain = parts[0]
		parts = parts[1:]
	}
	devFn := strings.Split(parts[1], ".")
	if len(devFn) != 2 {
		return bad("no single '.'")
	}
	fields := []struct {
		s        string
		min, max int
	}{{domain, 1, 8}, {parts[0], 2, 2}, {devFn[0], 2, 2}, {devFn[1], 1, 1}}
	var digits strings.Builder
	for _, f := range fields {
		if len(f.s) < f.min || len(f.s) > f.max || !allHex(f.s) {
			return bad(fmt.Sprintf("field %q", f.s))
		}
		digits.WriteString(f.s)
	}
	v, err := strconv.ParseUint(digits.String(), 16, 64) // at most 13 digits: fits
	if err != nil {
		return bad(err.Error())
	}
	return strconv.FormatUint(v, 16), nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}
