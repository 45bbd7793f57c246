package ibport

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in           string
		gbps         float64
		width, speed string
	}{
		{"400 Gb/sec (4X NDR)\n", 400, "4X", "NDR"},
		{"200 Gb/sec (4X HDR)", 200, "4X", "HDR"},
		{"100 Gb/sec (1X NDR)\n", 100, "1X", "NDR"},
		{"200 Gb/sec (2X NDR)", 200, "2X", "NDR"},
		{"100 Gb/sec (4X EDR)", 100, "4X", "EDR"},
		{"25 Gb/sec (1X EDR)", 25, "1X", "EDR"},
		{"56 Gb/sec (4X FDR)", 56, "4X", "FDR"},
		{"14 Gb/sec (1X FDR)", 14, "1X", "FDR"},
		{"40 Gb/sec (4X FDR10)", 40, "4X", "FDR10"},
		{"40 Gb/sec (4X QDR)", 40, "4X", "QDR"},
		{"20 Gb/sec (4X DDR)", 20, "4X", "DDR"},
		{"10 Gb/sec (4X SDR)\n", 10, "4X", "SDR"},
		{"2.5 Gb/sec (1X SDR)", 2.5, "1X", "SDR"},
		{"30 Gb/sec (12X SDR)", 30, "12X", "SDR"},
		{"800 Gb/sec (4X XDR)", 800, "4X", "XDR"},
		{"10 Gb/sec (4X)\n", 10, "4X", ""}, // kernels before SDR had a name
		{"2.5 Gb/sec (1X)", 2.5, "1X", ""},
		{"100 Gb/sec", 100, "", ""},
		{"  400 Gb/sec (4X NDR)  \n", 400, "4X", "NDR"},
		{"400  Gb/sec  ( 4X NDR )", 400, "4X", "NDR"},
	}
	for _, tt := range tests {
		gbps, width, speed, err := ParseRate(tt.in)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", tt.in, err)
			continue
		}
		if gbps != tt.gbps || width != tt.width || speed != tt.speed {
			t.Errorf("ParseRate(%q) = %v, %q, %q; want %v, %q, %q", tt.in, gbps, width, speed, tt.gbps, tt.width, tt.speed)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	for _, in := range []string{
		"", "\n", "400", "Gb/sec (4X NDR)", "-400 Gb/sec (4X NDR)", "+400 Gb/sec (4X NDR)",
		"1e3 Gb/sec (4X NDR)", "0x1p3 Gb/sec (4X NDR)", "Inf Gb/sec (4X NDR)", "NaN Gb/sec",
		"4.0.0 Gb/sec", ".5 Gb/sec", "5. Gb/sec", "400 Mb/sec (4X NDR)", "400 Gb/s (4X NDR)",
		"400 Gb/sec 4X NDR", "400 Gb/sec (4X NDR", "400 Gb/sec (4X NDR) extra",
		"400 Gb/sec ()", "400 Gb/sec (X NDR)", "400 Gb/sec (4x NDR)", "400 Gb/sec (NDR)",
		"400 Gb/sec (4X N-DR)", "400 Gb/sec (4X NDR HDR)", "N/A (no PMA)",
		"1" + strings.Repeat("0", 400) + " Gb/sec",
	} {
		if g, w, s, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, %q, %q; want an error", in, g, w, s)
		}
	}
}

func TestParseState(t *testing.T) {
	tests := []struct{ in, want string }{
		{"4: ACTIVE\n", "ACTIVE"},
		{"1: DOWN", "DOWN"},
		{"2: INIT", "INIT"},
		{"3: ARMED", "ARMED"},
		{"5: ACTIVE_DEFER", "ACTIVE_DEFER"},
		{"0: NOP", "NOP"},
		{"5: LinkUp\n", "LinkUp"},
		{"2: Polling", "Polling"},
		{"3: Disabled", "Disabled"},
		{"4: PortConfigurationTraining", "PortConfigurationTraining"},
		{"6: LinkErrorRecovery", "LinkErrorRecovery"},
		{"7: Phy Test\n", "Phy Test"},
		{"9: <unknown>", "<unknown>"},
		{"4:ACTIVE", "ACTIVE"},
	}
	for _, tt := range tests {
		got, err := ParseState(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseState(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "ACTIVE", "4:", "4: ", ": ACTIVE", "x: ACTIVE", "-1: DOWN", "4 ACTIVE"} {
		if got, err := ParseState(in); err == nil {
			t.Errorf("ParseState(%q) = %q; want an error", in, got)
		}
	}
}

func TestParseCounter(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  bool
	}{
		{"0\n", 0, false},
		{"2880761508848\n", 2880761508848, false},
		{"18446744073709551615\n", math.MaxUint64, false},
		{"18446744073709551616", 0, true},
		{"", 0, true},
		{"-1", 0, true},
		{"12 34", 0, true},
		{"0x10", 0, true},
	}
	for _, tt := range tests {
		got, err := parseCounter([]byte(tt.in))
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parseCounter(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
	if _, err := parseCounter([]byte("N/A (no PMA)\n")); !errors.Is(err, errNotAvailable) {
		t.Errorf("parseCounter(N/A (no PMA)) = %v, want errNotAvailable", err)
	}
}

func TestParseSpeedMbps(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  bool
	}{
		{"100000\n", 100000, false},
		{"-1\n", 0, false},
		{"0\n", 0, false},
		{"", 0, true},
		{"-", 0, true},
		{"fast", 0, true},
	}
	for _, tt := range tests {
		got, err := parseSpeedMbps([]byte(tt.in))
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parseSpeedMbps(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{
		"400 Gb/sec (4X NDR)\n", "2.5 Gb/sec (1X SDR)", "10 Gb/sec (4X)", "100 Gb/sec",
		"40 Gb/sec (4X FDR10)", "400 Gb/sec (4X NDR", "N/A",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		gbps, width, speed, err := ParseRate(s)
		if err != nil {
			return
		}
		if gbps < 0 || math.IsNaN(gbps) || math.IsInf(gbps, 0) {
			t.Fatalf("ParseRate(%q) gave rate %v", s, gbps)
		}
		if width != "" && !isWidth(width) || !isAlnum(speed) || width == "" && speed != "" {
			t.Fatalf("ParseRate(%q) gave width %q speed %q", s, width, speed)
		}
		// What parsed must parse the same once printed the kernel's way.
		text := strconv.FormatFloat(gbps, 'f', -1, 64) + " Gb/sec"
		if width != "" {
			text += " (" + strings.TrimSpace(width+" "+speed) + ")"
		}
		g2, w2, s2, err := ParseRate(text)
		if err != nil || g2 != gbps || w2 != width || s2 != speed {
			t.Fatalf("ParseRate(%q) = %v %q %q, but its reprint %q = %v %q %q (%v)", s, gbps, width, speed, text, g2, w2, s2, err)
		}
	})
}

func FuzzParseState(f *testing.F) {
	for _, s := range []string{"4: ACTIVE\n", "7: Phy Test", "1:DOWN", ": x", "4:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, err := ParseState(s)
		if err == nil && (name == "" || name != strings.TrimSpace(name)) {
			t.Fatalf("ParseState(%q) = %q", s, name)
		}
	})
}

func FuzzParseCounter(f *testing.F) {
	for _, s := range []string{"0\n", "18446744073709551615", "18446744073709551616", "N/A (no PMA)", " 7 "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseCounter(b)
		if err != nil {
			return
		}
		if got := strconv.FormatUint(v, 10); strings.TrimLeft(string(trimSpace(b)), "0") != strings.TrimLeft(got, "0") {
			t.Fatalf("parseCounter(%q) = %d", b, v)
		}
	})
}
