package frdump

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// seeds are the committed dumps: every opcode torch and Python's pickler write.
func seeds(f *testing.F, pattern string) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*", pattern))
	for i, p := range files {
		if i >= 6 {
			break
		}
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
			f.Add(b[:len(b)/2])
		}
	}
}

// walk visits a decoded value within a budget of visits, as any reader of it must: a
// pickle's memo can make a list hold itself, or share one value so that a tree walk of it
// is exponential.
func walk(v any, budget *int) {
	if *budget <= 0 {
		return
	}
	*budget--
	switch t := v.(type) {
	case *List:
		for _, x := range t.Items {
			walk(x, budget)
		}
	case *Dict:
		for i := range t.Keys {
			walk(t.Keys[i], budget)
			walk(t.Vals[i], budget)
		}
	case Tuple:
		for _, x := range t {
			walk(x, budget)
		}
	}
}

func FuzzDecodePickle(f *testing.F) {
	seeds(f, "nccl_trace_rank_[0-9]")
	f.Add([]byte("\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03."))
	f.Add([]byte("\x80\x02]q\x00h\x00a."))
	f.Add([]byte("(I01\nL-7L\nF1.5\ng0\np1\nt."))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := Limits{MaxItems: 1 << 16, MaxMarks: 64, MaxMemo: 1 << 12}
		v, err := DecodePickle(b, lim)
		if err != nil {
			var pe *PickleError
			if !errors.As(err, &pe) || pe.Offset < 0 || pe.Offset > len(b) {
				t.Fatalf("error %v is not a PickleError with an offset inside the input", err)
			}
		}
		budget := 1 << 18
		walk(v, &budget)
		// Whatever came back, the dump reader takes it without failing.
		if d, err := Read(b, lim); err == nil {
			p := d.Process(d.OwnRank(), "f")
			if _, err := json.Marshal(p); err != nil {
				t.Fatalf("process does not encode: %v", err)
			}
		}
	})
}

func FuzzDecodeJSON(f *testing.F) {
	seeds(f, "nccl_trace_rank_*.json")
	f.Add([]byte(`{"version": "2.10", "pg_config": {"0": {"ranks": "[0, 1]"}}, "entries": [{"profiling_name": "nccl:send 0->1"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := Limits{MaxItems: 1 << 16, MaxMarks: 64}
		v, _ := DecodeJSON(b, lim)
		budget := 1 << 18
		walk(v, &budget)
		if d, err := Read(b, lim); err == nil {
			p := d.Process(3, "f")
			if _, err := json.Marshal(p); err != nil {
				t.Fatalf("process does not encode: %v", err)
			}
		}
	})
}
