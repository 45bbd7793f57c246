package gpu

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestPackBusID(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"00000000:1B:00.0", "1b000"}, // NVML's form (8-digit domain, upper case)
		{"0000:1b:00.0", "1b000"},     // CUDA's and NCCL's form, the reference example
		{"00000000:00:06.0", "60"},    // the captures' GPU 0: `busId 60`
		{"00000000:00:07.0", "70"},    // the captures' GPU 1: `busId 70`
		{"00000000:5D:00.0", "5d000"},
		{"00000000:DB:00.0", "db000"},
		{"00000001:1B:00.0", "11b000"}, // a non-zero domain stays, above bit 20
		{"0000:00:00.0", "0"},
		{"00000000:9A:00.1", "9a001"},
		{"0001:00:02.3", "100023"},
		{"FFFFFFFF:FF:1F.7", "ffffffffff1f7"},
		{"1b:00.0", "1b000"}, // lspci's short form
	}
	for _, tt := range tests {
		got, err := PackBusID(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("PackBusID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "::.", "0000:1b:00.0\x00junk", "GPU-1b", "0000:1b:00.0 ", "100000000:1b:00.0",
		"1:00000000:00:00:00.0", "0000:1b:0.0", "0000:1b:00.00", "0000:1b:00", "0000:+1:00.0", "-000:1b:00.0"} {
		if got, err := PackBusID(bad); err == nil {
			t.Errorf("PackBusID(%q) = %q, want an error", bad, got)
		}
	}
}

func TestUnpackBusID(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"1b000", "0000:1b:00.0"},
		{"60", "0000:00:06.0"},
		{"11b000", "0001:1b:00.0"},
	} {
		got, err := unpackBusID(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("unpackBusID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := unpackBusID("0x60"); err == nil {
		t.Error("unpackBusID accepted 0x60")
	}
}

// FuzzPackBusID checks PackBusID against NCCL's busIdToInt64 on every input it accepts,
// and that packing is stable through unpackBusID.
func FuzzPackBusID(f *testing.F) {
	for _, s := range []string{"00000000:1B:00.0", "0000:1b:00.0", "00000000:00:06.0", "", ":", "0:0.0", "ffffffffffffffff", "G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := PackBusID(in)
		if err != nil {
			return
		}
		if want := ncclBusIDToInt64(in); got != strconv.FormatInt(want, 16) {
			t.Fatalf("PackBusID(%q) = %q, NCCL gives %x", in, got, want)
		}
		if got != strings.ToLower(got) || (len(got) > 1 && got[0] == '0') {
			t.Fatalf("PackBusID(%q) = %q: not lower-case hex without leading zeros", in, got)
		}
		unpacked, err := unpackBusID(got)
		if err != nil {
			t.Fatalf("unpackBusID(%q): %v", got, err)
		}
		again, err := PackBusID(unpacked)
		if err != nil || again != got {
			t.Fatalf("PackBusID(unpackBusID(%q)) = %q, %v", got, again, err)
		}
	})
}

// ncclBusIDToInt64 is NCCL's busIdToInt64 (src/misc/utils.cc) transcribed: skip ':' and
// '.', take up to 16 hex digits until another character, strtol base 16.
func ncclBusIDToInt64(s string) int64 {
	var hex []byte
	for i := 0; i < len(s) && len(hex) < 16; i++ {
		c := s[i]
		if c == ':' || c == '.' {
			continue
		}
		if !isHex(c) {
			break
		}
		hex = append(hex, c)
	}
	v, err := strconv.ParseInt(string(hex), 16, 64)
	if err != nil {
		if len(hex) == 0 {
			return 0
		}
		return 1<<63 - 1 // strtol saturates at LONG_MAX
	}
	return v
}

// unpackBusID is NCCL's int64ToBusId (src/misc/utils.cc): the packed form back to
// "dddd:bb:dd.f" (lower case). The sidecar never unpacks; the fuzz test checks with it
// that packing is stable.
func unpackBusID(packed string) (string, error) {
	v, err := strconv.ParseInt(packed, 16, 64)
	if err != nil || v < 0 {
		return "", fmt.Errorf("packed bus id %q: not a non-negative hex int64", packed)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%01x", v>>20, (v&0xff000)>>12, (v&0xff0)>>4, v&0xf), nil
}
