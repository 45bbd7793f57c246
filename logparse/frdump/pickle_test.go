package frdump

import (
	"errors"
	"math/big"
	"reflect"
	"strings"
	"testing"
)

func TestDecodePickle(t *testing.T) {
	big1 := new(big.Int).Lsh(big.NewInt(1), 70)
	for _, tc := range []struct {
		name string
		in   string
		want any
	}{
		{"none", "\x80\x02N.", nil},
		{"bools", "\x80\x02\x88\x89\x86.", Tuple{true, false}},
		{"small ints", "\x80\x02K\x07M\x01\x02J\xff\xff\xff\xff\x87.", Tuple{int64(7), int64(0x201), int64(-1)}},
		{"long1 8 bytes", "\x80\x02\x8a\x08\x00\x00\x10\x8e\xef\x1f\xb3\x18.", int64(0x18b31fef8e100000)},
		{"long1 negative", "\x80\x02\x8a\x01\xff.", int64(-1)},
		{"long1 zero", "\x80\x02\x8a\x00.", int64(0)},
		{"long4 beyond int64", "\x80\x02\x8b\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x40.", big1},
		{"binfloat", "\x80\x02G@\x19\x00\x00\x00\x00\x00\x00.", 6.25},
		{"text protocol", "(I01\nI42\nL-7L\nF1.5\nt.", Tuple{true, int64(42), int64(-7), 1.5}},
		{"strings", "\x80\x04\x8c\x03abcX\x02\x00\x00\x00\xc3\xa9\x86.", Tuple{"abc", "é"}},
		{"bytes", "\x80\x03C\x02\x00\x01.", Bytes{0, 1}},
		{"list appends", "\x80\x02]q\x00(K\x01K\x02e.", &List{Items: []any{int64(1), int64(2)}}},
		{"list append", "\x80\x02]K\x05a.", &List{Items: []any{int64(5)}}},
		{"dict setitems", "\x80\x02}(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00bNu.",
			&Dict{Keys: []any{"a", "b"}, Vals: []any{int64(1), nil}}},
		{"dict setitem repeated key", "\x80\x02}X\x01\x00\x00\x00aK\x01sX\x01\x00\x00\x00aK\x02s.",
			&Dict{Keys: []any{"a"}, Vals: []any{int64(2)}}},
		{"tuple key", "\x80\x02}K\x01K\x02\x86K\x03s.", &Dict{Keys: []any{Tuple{int64(1), int64(2)}}, Vals: []any{int64(3)}}},
		{"memo", "\x80\x02X\x01\x00\x00\x00xq\x05h\x05r\x07\x00\x00\x00j\x07\x00\x00\x00\x87.", Tuple{"x", "x", "x"}},
		{"memoize protocol 4", "\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00\x8c\x01y\x94h\x00\x86.", Tuple{"y", "y"}},
		{"old list and dict", "(K\x01l(X\x01\x00\x00\x00kK\x02d\x86.",
			Tuple{&List{Items: []any{int64(1)}}, &Dict{Keys: []any{"k"}, Vals: []any{int64(2)}}}},
		{"dup pop", "\x80\x02K\x01\x32\x30.", int64(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodePickle([]byte(tc.in), Limits{})
			if err != nil {
				t.Fatalf("err %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestDecodePickleSharesMemoizedContainers(t *testing.T) {
	// l = []; l.append(l): a value that holds itself decodes without looping.
	v, err := DecodePickle([]byte("\x80\x02]q\x00h\x00a."), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	l := v.(*List)
	if len(l.Items) != 1 || l.Items[0] != any(l) {
		t.Fatalf("got %#v", l)
	}
}

func TestDecodePickleRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, in, op string
		at           int
	}{
		{"global", "\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.", "GLOBAL (0x63 'c')", 2},
		{"stack global", "\x80\x04\x8c\x02os\x8c\x06system\x93.", "STACK_GLOBAL (0x93)", 14},
		{"reduce", "\x80\x02)R.", "REDUCE (0x52 'R')", 3},
		{"build", "\x80\x02}}b.", "BUILD (0x62 'b')", 4},
		{"inst", "(ios\nsystem\n.", "INST (0x69 'i')", 1},
		{"obj", "(o.", "OBJ (0x6f 'o')", 1},
		{"newobj", "\x80\x02))\x81.", "NEWOBJ (0x81)", 4},
		{"persid", "\x80\x02X\x01\x00\x00\x000Q.", "BINPERSID (0x51 'Q')", 8},
		{"persid text", "P0\n.", "PERSID (0x50 'P')", 0},
		{"ext1", "\x80\x02\x82\x01.", "EXT1 (0x82)", 2},
		{"set", "\x80\x04\x8f.", "EMPTY_SET (0x8f)", 2},
		{"unknown", "\x80\x02\xff.", "unknown (0xff)", 2},
		{"protocol 0 string", "S'a'\n.", "STRING (0x53 'S')", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePickle([]byte(tc.in), Limits{})
			var pe *PickleError
			if !errors.As(err, &pe) || !errors.Is(err, ErrRefused) {
				t.Fatalf("want a refusal, got %v", err)
			}
			if pe.Offset != tc.at || !strings.Contains(err.Error(), tc.op) {
				t.Errorf("got %q (offset %d), want %s at %d", err, pe.Offset, tc.op, tc.at)
			}
		})
	}
}

func TestDecodePickleBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, in, says string
		truncated      bool
	}{
		{"empty", "", "ended before", true},
		{"no stop", "\x80\x02N", "ended before", true},
		{"cut string", "\x80\x02X\x05\x00\x00\x00ab", "needs 5 more", true},
		{"huge string length", "\x80\x02X\xff\xff\xff\xffab", "needs 4294967295 more", true},
		{"cut binfloat", "\x80\x02G@\x19", "needs 8 more", true},
		{"protocol 6", "\x80\x06N.", "newer than 5", false},
		{"stop on empty", "\x80\x02.", "stack is empty", false},
		{"append to dict", "\x80\x02}K\x01a.", "not a list", false},
		{"setitems on list", "\x80\x02](K\x01K\x02u.", "not a dict", false},
		{"odd setitems", "\x80\x02}(K\x01u.", "odd number", false},
		{"list as key", "\x80\x02}]K\x01s.", "dict key is a list", false},
		{"memo never stored", "\x80\x02h\x03.", "never stored", false},
		{"tuple2 short", "\x80\x02K\x01\x86.", "fewer", false},
		{"pop mark without mark", "\x80\x021.", "no MARK", false},
		{"long too long", "\x80\x02\x8b\x00\x10\x00\x00.", "at most 256", false},
		{"int text garbage", "Ixyz\n.", "not an integer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePickle([]byte(tc.in), Limits{})
			if err == nil {
				t.Fatal("want an error")
			}
			if !strings.Contains(err.Error(), tc.says) || errors.Is(err, ErrTruncated) != tc.truncated {
				t.Errorf("got %q (truncated %v), want %q (truncated %v)", err, errors.Is(err, ErrTruncated), tc.says, tc.truncated)
			}
		})
	}
}

func TestDecodePickleLimits(t *testing.T) {
	many := "\x80\x02(" + strings.Repeat("N", 100) + "t."
	if _, err := DecodePickle([]byte(many), Limits{MaxItems: 50}); err == nil || !strings.Contains(err.Error(), "more than 50 values") {
		t.Errorf("items: %v", err)
	}
	deep := "\x80\x02" + strings.Repeat("(", 20)
	if _, err := DecodePickle([]byte(deep), Limits{MaxMarks: 10}); err == nil || !strings.Contains(err.Error(), "nested MARKs") {
		t.Errorf("marks: %v", err)
	}
	memo := "\x80\x02N" + "q\x01q\x02q\x03" + "."
	if _, err := DecodePickle([]byte(memo), Limits{MaxMemo: 2}); err == nil || !strings.Contains(err.Error(), "memo entries") {
		t.Errorf("memo: %v", err)
	}
}

func TestDecodePickleSalvagesTruncated(t *testing.T) {
	// {"version": "2.10", "entries": [{"a": 1}, {"a": 2, "b"... cut inside the second entry.
	in := "\x80\x02}(X\x07\x00\x00\x00versionX\x04\x00\x00\x002.10X\x07\x00\x00\x00entries](" +
		"}(X\x01\x00\x00\x00aK\x01u" + "}(X\x01\x00\x00\x00aK\x02X\x01\x00\x00\x00b"
	v, err := DecodePickle([]byte(in), Limits{})
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("want truncation, got %v", err)
	}
	top, ok := v.(*Dict)
	if !ok {
		t.Fatalf("salvaged %#v", v)
	}
	ver, _ := top.Get("version")
	entries, _ := top.Get("entries")
	l, ok := entries.(*List)
	if ver != "2.10" || !ok || len(l.Items) != 2 {
		t.Fatalf("salvaged %#v", top)
	}
	second := l.Items[1].(*Dict)
	if a, _ := second.Get("a"); a != int64(2) || len(second.Keys) != 1 {
		t.Errorf("second entry %#v: the key without its value is dropped", second)
	}
}
