package snapshot

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Ops and Marks are the bulk of a snapshot (every node writes them every second), so they
// travel as one compact string each instead of JSON objects: about a third of the size.
//
// Ops: entries separated by ';', each "seq,t,op,count,dtype[,red[,root[,idx]]]". After the
// first entry seq, t and idx are deltas from the previous entry, and an empty seq delta means
// +1. Op and datatype names are abbreviated (AR = AllReduce, bf16 = bfloat16, ...). An entry
// without idx has none (0); the next entry's idx delta then counts from 0.
//
// Marks: entries "seq,digest,t" separated by ';', seq and t as deltas after the first.

// Ops is a compactly encoded list of ops, ordered by Seq.
type Ops []Op

// Marks is a compactly encoded list of marks, ordered by Seq.
type Marks []Mark

var opShort = map[string]string{"AllReduce": "AR", "AllGather": "AG", "ReduceScatter": "RS", "Broadcast": "BC",
	"Reduce": "RD", "AlltoAll": "AA", "Gather": "GA", "Scatter": "SC", "Send": "SE", "Recv": "RE",
	"PutSignal": "PS", "Signal": "SG", "WaitSignal": "WS"}

var dtypeShort = map[string]string{"int8": "i8", "uint8": "u8", "int32": "i32", "uint32": "u32", "int64": "i64",
	"uint64": "u64", "float16": "f16", "float32": "f32", "float64": "f64", "bfloat16": "bf16",
	"float8e4m3": "e4m3", "float8e5m2": "e5m2"}

var opLong, dtypeLong = invert(opShort), invert(dtypeShort)

func invert(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

func abbrev(m map[string]string, s string) string {
	if a, ok := m[s]; ok {
		return a
	}
	return s
}

// MarshalJSON writes the compact string.
func (ops Ops) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	var prevSeq, prevIdx int64
	var prevT Micros
	for i, o := range ops {
		if strings.ContainsAny(o.Op+o.Dtype+o.Red, ",;\"\\") {
			return nil, fmt.Errorf("op %q/%q/%q holds a separator", o.Op, o.Dtype, o.Red)
		}
		if i > 0 {
			b.WriteByte(';')
			if d := o.Seq - prevSeq; d != 1 {
				b.WriteString(strconv.FormatInt(d, 10))
			}
			b.WriteByte(',')
			b.WriteString(strconv.FormatInt(int64(o.T-prevT), 10))
		} else {
			b.WriteString(strconv.FormatInt(o.Seq, 10))
			b.WriteByte(',')
			b.WriteString(strconv.FormatInt(int64(o.T), 10))
		}
		b.WriteByte(',')
		b.WriteString(abbrev(opShort, o.Op))
		b.WriteByte(',')
		b.WriteString(strconv.FormatUint(o.Count, 10))
		b.WriteByte(',')
		b.WriteString(abbrev(dtypeShort, o.Dtype))
		if o.Red != "" || o.Root != 0 || o.Idx != 0 {
			b.WriteByte(',')
			b.WriteString(o.Red)
		}
		if o.Root != 0 || o.Idx != 0 {
			b.WriteByte(',')
			b.WriteString(strconv.Itoa(o.Root))
		}
		if o.Idx != 0 {
			b.WriteByte(',')
			b.WriteString(strconv.FormatInt(o.Idx-prevIdx, 10))
		}
		prevSeq, prevT, prevIdx = o.Seq, o.T, o.Idx
	}
	return json.Marshal(b.String())
}

// UnmarshalJSON reads the compact string (or, for older writers, a JSON array of ops).
func (ops *Ops) UnmarshalJSON(data []byte) error {
	var plain []Op
	entries, err := compactEntries(data, &plain, "ops", 5, 8)
	if err != nil || entries == nil {
		*ops = plain
		return err
	}
	*ops = make(Ops, 0, len(entries))
	var prev Op
	for i, f := range entries {
		seq, t, err := seqAndTime(f[0], f[1], i, prev.Seq, prev.T)
		if err != nil {
			return fmt.Errorf("ops entry %d: %w", i, err)
		}
		o := Op{Seq: seq, T: t, Op: abbrev(opLong, f[2]), Dtype: abbrev(dtypeLong, f[4])}
		if o.Count, err = strconv.ParseUint(f[3], 10, 64); err != nil {
			return fmt.Errorf("ops entry %d count: %w", i, err)
		}
		if len(f) > 5 {
			o.Red = f[5]
		}
		if len(f) > 6 {
			if o.Root, err = strconv.Atoi(f[6]); err != nil {
				return fmt.Errorf("ops entry %d root: %w", i, err)
			}
		}
		if len(f) > 7 {
			d, err := strconv.ParseInt(f[7], 10, 64)
			if err != nil {
				return fmt.Errorf("ops entry %d idx: %w", i, err)
			}
			if o.Idx = d; i > 0 {
				o.Idx += prev.Idx
			}
		}
		*ops = append(*ops, o)
		prev = o
	}
	return nil
}

// compactEntries reads one compact list: a JSON array goes into plain (older writers) and
// nil entries are returned; otherwise the string's ';'-separated entries, split on ',' and
// checked for their field count.
func compactEntries(data []byte, plain any, what string, minFields, maxFields int) ([][]string, error) {
	if len(data) > 0 && data[0] == '[' {
		return nil, json.Unmarshal(data, plain)
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if s == "" {
		return nil, nil
	}
	var out [][]string
	for i, e := range strings.Split(s, ";") {
		f := strings.Split(e, ",")
		if len(f) < minFields || len(f) > maxFields {
			return nil, fmt.Errorf("%s entry %d %q: want %d to %d fields", what, i, e, minFields, maxFields)
		}
		out = append(out, f)
	}
	return out, nil
}

// seqAndTime reads an entry's position and time, deltas from the previous entry after the
// first (where an empty position delta means +1).
func seqAndTime(seqField, timeField string, i int, prevSeq int64, prevT Micros) (int64, Micros, error) {
	seq, err := parseDelta(seqField, i > 0)
	if err != nil {
		return 0, 0, fmt.Errorf("seq: %w", err)
	}
	t, err := strconv.ParseInt(timeField, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("time: %w", err)
	}
	if i > 0 {
		seq += prevSeq
		t += int64(prevT)
	}
	return seq, Micros(t), nil
}

// parseDelta reads a sequence delta; after the first entry an empty one means +1.
func parseDelta(s string, relative bool) (int64, error) {
	if s == "" && relative {
		return 1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// MarshalJSON writes the compact string.
func (ms Marks) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	var prevSeq int64
	var prevT Micros
	for i, m := range ms {
		if strings.ContainsAny(m.Digest, ",;\"\\") {
			return nil, fmt.Errorf("digest %q holds a separator", m.Digest)
		}
		if i > 0 {
			b.WriteByte(';')
			b.WriteString(strconv.FormatInt(m.Seq-prevSeq, 10))
			b.WriteByte(',')
			b.WriteString(m.Digest)
			b.WriteByte(',')
			b.WriteString(strconv.FormatInt(int64(m.T-prevT), 10))
		} else {
			b.WriteString(strconv.FormatInt(m.Seq, 10))
			b.WriteByte(',')
			b.WriteString(m.Digest)
			b.WriteByte(',')
			b.WriteString(strconv.FormatInt(int64(m.T), 10))
		}
		prevSeq, prevT = m.Seq, m.T
	}
	return json.Marshal(b.String())
}

// UnmarshalJSON reads the compact string (or a JSON array of marks).
func (ms *Marks) UnmarshalJSON(data []byte) error {
	var plain []Mark
	entries, err := compactEntries(data, &plain, "marks", 3, 3)
	if err != nil || entries == nil {
		*ms = plain
		return err
	}
	*ms = make(Marks, 0, len(entries))
	var prev Mark
	for i, f := range entries {
		// A mark's seq delta is always written, so an empty one is malformed.
		if f[0] == "" {
			return fmt.Errorf("marks entry %d: empty position", i)
		}
		seq, t, err := seqAndTime(f[0], f[2], i, prev.Seq, prev.T)
		if err != nil {
			return fmt.Errorf("marks entry %d: %w", i, err)
		}
		prev = Mark{Seq: seq, Digest: f[1], T: t}
		*ms = append(*ms, prev)
	}
	return nil
}
