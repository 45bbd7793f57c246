package frdump

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// The value model both readers build: plain data only.
//
//	nil, bool, int64, *big.Int (an integer beyond int64), float64, string, Bytes,
//	Tuple, *List, *Dict
//
// Lists and dicts are pointers because a pickle may refer to one object twice (its memo);
// a value may therefore refer to itself, and whoever walks one bounds the depth.

// Bytes is a Python bytes or bytearray value.
type Bytes []byte

// Tuple is a Python tuple.
type Tuple []any

// List is a Python list.
type List struct{ Items []any }

// Dict is a Python dict in its insertion order. Keys are plain values too; tuples are
// allowed as keys, so it is kept as two slices rather than a Go map.
type Dict struct {
	Keys []any
	Vals []any
	// index finds string keys once the dict is large (a dump's entries have about 20).
	index map[string]int
}

// indexFrom is the size from which a dict indexes its string keys.
const indexFrom = 32

// Get returns the value of a string key and whether it was there.
func (d *Dict) Get(key string) (any, bool) {
	if i := d.find(key); i >= 0 {
		return d.Vals[i], true
	}
	return nil, false
}

func (d *Dict) find(key string) int {
	if d == nil {
		return -1
	}
	if d.index != nil {
		if i, ok := d.index[key]; ok {
			return i
		}
		return -1
	}
	for i, k := range d.Keys {
		if s, ok := k.(string); ok && s == key {
			return i
		}
	}
	return -1
}

func (d *Dict) set(k, v any) {
	// A later SETITEM of the same key replaces the value, as in Python.
	ks, isString := k.(string)
	if isString {
		if i := d.find(ks); i >= 0 {
			d.Vals[i] = v
			return
		}
	}
	d.Keys = append(d.Keys, k)
	d.Vals = append(d.Vals, v)
	switch {
	case d.index != nil && isString:
		d.index[ks] = len(d.Keys) - 1
	case d.index == nil && len(d.Keys) >= indexFrom:
		d.index = make(map[string]int, len(d.Keys))
		for i, key := range d.Keys {
			if s, ok := key.(string); ok {
				if _, dup := d.index[s]; !dup {
					d.index[s] = i
				}
			}
		}
	}
}

// Limits bound what a decoder builds. Zero fields take the defaults.
type Limits struct {
	// MaxItems bounds the values created (each string, number, container, memo copy);
	// default 4M, about 200 MiB of Go values at most.
	MaxItems int
	// MaxMarks bounds nested MARKs (open tuples, lists and dicts being filled); default 256.
	MaxMarks int
	// MaxMemo bounds the memo's entries; default 1M.
	MaxMemo int
}

func (l Limits) withDefaults() Limits {
	if l.MaxItems <= 0 {
		l.MaxItems = 4 << 20
	}
	if l.MaxMarks <= 0 {
		l.MaxMarks = 256
	}
	if l.MaxMemo <= 0 {
		l.MaxMemo = 1 << 20
	}
	return l
}

// PickleError says why a pickle could not be read, and where.
type PickleError struct {
	Offset int    // of the opcode
	Op     byte   // the opcode (0 when the input ended)
	Reason string // what was wrong
	// Refused is set for an opcode that would import, call or build objects: the decoder
	// never does that.
	Refused bool
	// Truncated is set when the input ended inside a value or before STOP.
	Truncated bool
}

func (e *PickleError) Error() string {
	if e.Truncated {
		return fmt.Sprintf("pickle is truncated at offset %d: %s", e.Offset, e.Reason)
	}
	return fmt.Sprintf("pickle opcode %s at offset %d: %s", OpName(e.Op), e.Offset, e.Reason)
}

// ErrRefused and ErrTruncated are matched by errors.Is on a PickleError.
var (
	ErrRefused   = errors.New("pickle opcode refused")
	ErrTruncated = errors.New("pickle truncated")
)

// Is lets errors.Is tell a refused opcode and a truncated input apart.
func (e *PickleError) Is(target error) bool {
	return (target == ErrRefused && e.Refused) || (target == ErrTruncated && e.Truncated)
}

// opNames names the opcodes of pickle protocols 0-5 (Python's pickletools spelling).
var opNames = map[byte]string{
	'(': "MARK", '.': "STOP", '0': "POP", '1': "POP_MARK", '2': "DUP", 'F': "FLOAT", 'I': "INT",
	'J': "BININT", 'K': "BININT1", 'L': "LONG", 'M': "BININT2", 'N': "NONE", 'P': "PERSID",
	'Q': "BINPERSID", 'R': "REDUCE", 'S': "STRING", 'T': "BINSTRING", 'U': "SHORT_BINSTRING",
	'V': "UNICODE", 'X': "BINUNICODE", 'a': "APPEND", 'b': "BUILD", 'c': "GLOBAL", 'd': "DICT",
	'}': "EMPTY_DICT", 'e': "APPENDS", 'g': "GET", 'h': "BINGET", 'i': "INST", 'j': "LONG_BINGET",
	'l': "LIST", ']': "EMPTY_LIST", 'o': "OBJ", 'p': "PUT", 'q': "BINPUT", 'r': "LONG_BINPUT",
	's': "SETITEM", 't': "TUPLE", ')': "EMPTY_TUPLE", 'u': "SETITEMS", 'G': "BINFLOAT",
	0x80: "PROTO", 0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x85: "TUPLE1",
	0x86: "TUPLE2", 0x87: "TUPLE3", 0x88: "NEWTRUE", 0x89: "NEWFALSE", 0x8a: "LONG1", 0x8b: "LONG4",
	'B': "BINBYTES", 'C': "SHORT_BINBYTES", 0x8c: "SHORT_BINUNICODE", 0x8d: "BINUNICODE8",
	0x8e: "BINBYTES8", 0x8f: "EMPTY_SET", 0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX",
	0x93: "STACK_GLOBAL", 0x94: "MEMOIZE", 0x95: "FRAME", 0x96: "BYTEARRAY8", 0x97: "NEXT_BUFFER",
	0x98: "READONLY_BUFFER",
}

// OpName names an opcode for an error: "GLOBAL (0x63 'c')".
func OpName(op byte) string {
	name, ok := opNames[op]
	if !ok {
		name = "unknown"
	}
	if op >= 0x20 && op < 0x7f {
		return fmt.Sprintf("%s (0x%02x %q)", name, op, rune(op))
	}
	return fmt.Sprintf("%s (0x%02x)", name, op)
}

// refusedWhy says why an opcode is never run: what it would make Python do.
func refusedWhy(op byte) string {
	switch op {
	case 'c', 0x93:
		return "it imports a Python name; only plain data (dict, list, tuple, str, bytes, int, float, bool, None) is read, nothing is ever imported or called"
	case 'R', 'b', 'i', 'o', 0x81, 0x92:
		return "it calls or builds a Python object; only plain data (dict, list, tuple, str, bytes, int, float, bool, None) is read, nothing is ever called"
	case 'P', 'Q':
		return "it asks for a persistent object (a tensor's storage) the reader would have to supply; only plain data is read"
	case 0x82, 0x83, 0x84:
		return "it names an object of the copyreg extension registry; only plain data is read"
	case 0x8f, 0x90, 0x91:
		return "sets are not part of a Flight Recorder dump; only dict, list, tuple, str, bytes, int, float, bool and None are read"
	case 0x97, 0x98:
		return "out-of-band buffers are not read"
	case 'S', 'V':
		return "protocol 0 string opcodes are not read (dumps are written with protocol 2)"
	}
	return "not a pickle opcode"
}

// maxIntBytes bounds LONG1/LONG4 integers (Flight Recorder numbers fit in 8).
const maxIntBytes = 256

// decoder runs a pickle's opcodes over a stack; marks are the stack positions of MARKs.
type decoder struct {
	b     []byte
	i     int
	lim   Limits
	stack []any
	marks []int
	memo  map[uint64]any
	items int
}

// DecodePickle reads a pickle of plain data. On failure it returns a *PickleError and,
// when the stream had started, what it had built so far with every open container closed:
// the readable part of a truncated dump.
func DecodePickle(b []byte, lim Limits) (any, error) {
	d := &decoder{b: b, lim: lim.withDefaults(), memo: map[uint64]any{}}
	if err := d.run(); err != nil {
		return d.salvage(), err
	}
	return d.stack[0], nil
}

func (d *decoder) fail(at int, op byte, format string, args ...any) error {
	return &PickleError{Offset: at, Op: op, Reason: fmt.Sprintf(format, args...)}
}

func (d *decoder) truncated(at int, op byte, what string) error {
	return &PickleError{Offset: at, Op: op, Truncated: true, Reason: what}
}

// take returns the next n bytes.
func (d *decoder) take(at int, op byte, n uint64) ([]byte, error) {
	if n > uint64(len(d.b)-d.i) {
		return nil, d.truncated(at, op, fmt.Sprintf("%s needs %d more byte(s), %d are left", opNames[op], n, len(d.b)-d.i))
	}
	out := d.b[d.i : d.i+int(n)]
	d.i += int(n)
	return out, nil
}

// line returns the text up to the next newline (protocol 0 arguments).
func (d *decoder) line(at int, op byte) (string, error) {
	for j := d.i; j < len(d.b); j++ {
		if d.b[j] == '\n' {
			s := string(d.b[d.i:j])
			d.i = j + 1
			return s, nil
		}
		if j-d.i > 4096 {
			return "", d.fail(at, op, "argument longer than 4096 bytes")
		}
	}
	return "", d.truncated(at, op, opNames[op]+" argument has no end of line")
}

func (d *decoder) push(at int, op byte, v any) error {
	d.items++
	if d.items > d.lim.MaxItems {
		return d.fail(at, op, "more than %d values: the dump is larger than the reader's bound", d.lim.MaxItems)
	}
	d.stack = append(d.stack, v)
	return nil
}

func (d *decoder) pop(at int, op byte) (any, error) {
	if len(d.stack) == 0 || (len(d.marks) > 0 && len(d.stack) == d.marks[len(d.marks)-1]) {
		return nil, d.fail(at, op, "stack is empty")
	}
	v := d.stack[len(d.stack)-1]
	d.stack = d.stack[:len(d.stack)-1]
	return v, nil
}

func (d *decoder) top(at int, op byte) (any, error) {
	if len(d.stack) == 0 || (len(d.marks) > 0 && len(d.stack) == d.marks[len(d.marks)-1]) {
		return nil, d.fail(at, op, "stack is empty")
	}
	return d.stack[len(d.stack)-1], nil
}

// popMark returns the values pushed since the last MARK and removes them and the mark.
func (d *decoder) popMark(at int, op byte) ([]any, error) {
	if len(d.marks) == 0 {
		return nil, d.fail(at, op, "no MARK before it")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := append([]any(nil), d.stack[m:]...)
	d.stack = d.stack[:m]
	return items, nil
}

func (d *decoder) memoize(at int, op byte, id uint64) error {
	v, err := d.top(at, op)
	if err != nil {
		return err
	}
	if _, ok := d.memo[id]; !ok && len(d.memo) >= d.lim.MaxMemo {
		return d.fail(at, op, "more than %d memo entries", d.lim.MaxMemo)
	}
	d.memo[id] = v
	return nil
}

func (d *decoder) recall(at int, op byte, id uint64) error {
	v, ok := d.memo[id]
	if !ok {
		return d.fail(at, op, "memo entry %d was never stored", id)
	}
	return d.push(at, op, v)
}

func (d *decoder) appendTo(at int, op byte, target any, items []any) error {
	l, ok := target.(*List)
	if !ok {
		return d.fail(at, op, "appends to a %s, not a list", typeName(target))
	}
	l.Items = append(l.Items, items...)
	return nil
}

func (d *decoder) setItems(at int, op byte, target any, items []any) error {
	m, ok := target.(*Dict)
	if !ok {
		return d.fail(at, op, "sets items of a %s, not a dict", typeName(target))
	}
	if len(items)%2 != 0 {
		return d.fail(at, op, "odd number of keys and values (%d)", len(items))
	}
	for k := 0; k < len(items); k += 2 {
		if !hashable(items[k]) {
			return d.fail(at, op, "dict key is a %s", typeName(items[k]))
		}
		m.set(items[k], items[k+1])
	}
	return nil
}

func hashable(v any) bool {
	switch t := v.(type) {
	case *List, *Dict:
		return false
	case Tuple:
		for _, x := range t {
			if !hashable(x) {
				return false
			}
		}
	}
	return true
}

// le returns a little-endian unsigned integer of the next n bytes.
func (d *decoder) le(at int, op byte, n int) (uint64, error) {
	b, err := d.take(at, op, uint64(n))
	if err != nil {
		return 0, err
	}
	var v uint64
	for k := n - 1; k >= 0; k-- {
		v = v<<8 | uint64(b[k])
	}
	return v, nil
}

// signedLE decodes a little-endian two's-complement integer (LONG1, LONG4).
func signedLE(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var v uint64
		for k := len(b) - 1; k >= 0; k-- {
			v = v<<8 | uint64(b[k])
		}
		shift := uint(64 - 8*len(b))
		return int64(v<<shift) >> shift
	}
	be := make([]byte, len(b))
	for k := range b {
		be[len(b)-1-k] = b[k]
	}
	n := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if n.IsInt64() {
		return n.Int64()
	}
	return n
}

func (d *decoder) run() error {
	for {
		if d.i >= len(d.b) {
			return d.truncated(d.i, 0, "the input ended before the pickle's STOP opcode")
		}
		at, op := d.i, d.b[d.i]
		d.i++
		var err error
		switch op {
		case 0x80: // PROTO
			var v []byte
			if v, err = d.take(at, op, 1); err == nil && v[0] > 5 {
				err = d.fail(at, op, "protocol %d is newer than 5", v[0])
			}
		case 0x95: // FRAME: the frame's length; its content follows inline.
			_, err = d.le(at, op, 8)
		case '.': // STOP
			v, perr := d.pop(at, op)
			if perr != nil {
				return perr
			}
			d.stack, d.marks = append(d.stack[:0], v), nil
			return nil
		case '(':
			if len(d.marks) >= d.lim.MaxMarks {
				return d.fail(at, op, "more than %d nested MARKs", d.lim.MaxMarks)
			}
			d.marks = append(d.marks, len(d.stack))
		case '0':
			_, err = d.pop(at, op)
		case '1':
			_, err = d.popMark(at, op)
		case '2':
			var v any
			if v, err = d.top(at, op); err == nil {
				err = d.push(at, op, v)
			}
		case 'N':
			err = d.push(at, op, nil)
		case 0x88:
			err = d.push(at, op, true)
		case 0x89:
			err = d.push(at, op, false)
		case 'K':
			var v uint64
			if v, err = d.le(at, op, 1); err == nil {
				err = d.push(at, op, int64(v))
			}
		case 'M':
			var v uint64
			if v, err = d.le(at, op, 2); err == nil {
				err = d.push(at, op, int64(v))
			}
		case 'J':
			var v uint64
			if v, err = d.le(at, op, 4); err == nil {
				err = d.push(at, op, int64(int32(uint32(v))))
			}
		case 0x8a, 0x8b: // LONG1, LONG4
			width := 1
			if op == 0x8b {
				width = 4
			}
			var n uint64
			if n, err = d.le(at, op, width); err != nil {
				break
			}
			if n > maxIntBytes {
				err = d.fail(at, op, "integer of %d bytes (the reader takes at most %d)", n, maxIntBytes)
				break
			}
			var b []byte
			if b, err = d.take(at, op, n); err == nil {
				err = d.push(at, op, signedLE(b))
			}
		case 'I', 'L': // protocol 0 integers, "I01\n" and "I00\n" are booleans
			var s string
			if s, err = d.line(at, op); err != nil {
				break
			}
			err = d.textInt(at, op, s)
		case 'F':
			var s string
			if s, err = d.line(at, op); err != nil {
				break
			}
			f, perr := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if perr != nil {
				err = d.fail(at, op, "not a float: %q", s)
				break
			}
			err = d.push(at, op, f)
		case 'G':
			var v []byte
			if v, err = d.take(at, op, 8); err == nil {
				err = d.push(at, op, math.Float64frombits(binary.BigEndian.Uint64(v)))
			}
		case 'X', 0x8c, 0x8d, 'T', 'U': // unicode strings; protocol 0-1 byte strings are ASCII
			var n uint64
			var v []byte
			if n, err = d.le(at, op, lengthWidth(op)); err == nil {
				if v, err = d.take(at, op, n); err == nil {
					err = d.push(at, op, string(v))
				}
			}
		case 'B', 'C', 0x8e, 0x96: // bytes, bytearray
			var n uint64
			var v []byte
			if n, err = d.le(at, op, lengthWidth(op)); err == nil {
				if v, err = d.take(at, op, n); err == nil {
					err = d.push(at, op, Bytes(append([]byte(nil), v...)))
				}
			}
		case ']':
			err = d.push(at, op, &List{})
		case ')':
			err = d.push(at, op, Tuple{})
		case '}':
			err = d.push(at, op, &Dict{})
		case 'l':
			var items []any
			if items, err = d.popMark(at, op); err == nil {
				err = d.push(at, op, &List{Items: items})
			}
		case 't':
			var items []any
			if items, err = d.popMark(at, op); err == nil {
				err = d.push(at, op, Tuple(items))
			}
		case 0x85, 0x86, 0x87: // TUPLE1-3
			n := int(op-0x85) + 1
			if len(d.stack)-n < d.floor() {
				err = d.fail(at, op, "needs %d values, the stack holds fewer", n)
				break
			}
			t := Tuple(append([]any(nil), d.stack[len(d.stack)-n:]...))
			d.stack = d.stack[:len(d.stack)-n]
			err = d.push(at, op, t)
		case 'd':
			var items []any
			if items, err = d.popMark(at, op); err == nil {
				m := &Dict{}
				if err = d.setItems(at, op, m, items); err == nil {
					err = d.push(at, op, m)
				}
			}
		case 'a':
			var v, target any
			if v, err = d.pop(at, op); err == nil {
				if target, err = d.top(at, op); err == nil {
					err = d.appendTo(at, op, target, []any{v})
				}
			}
		case 'e':
			var items []any
			var target any
			if items, err = d.popMark(at, op); err == nil {
				if target, err = d.top(at, op); err == nil {
					err = d.appendTo(at, op, target, items)
				}
			}
		case 's':
			var k, v, target any
			if v, err = d.pop(at, op); err != nil {
				break
			}
			if k, err = d.pop(at, op); err != nil {
				break
			}
			if target, err = d.top(at, op); err == nil {
				err = d.setItems(at, op, target, []any{k, v})
			}
		case 'u':
			var items []any
			var target any
			if items, err = d.popMark(at, op); err == nil {
				if target, err = d.top(at, op); err == nil {
					err = d.setItems(at, op, target, items)
				}
			}
		case 'q', 'r', 'p': // BINPUT, LONG_BINPUT, PUT
			var id uint64
			if id, err = d.memoID(at, op); err == nil {
				err = d.memoize(at, op, id)
			}
		case 0x94: // MEMOIZE: the next memo index
			err = d.memoize(at, op, uint64(len(d.memo)))
		case 'h', 'j', 'g': // BINGET, LONG_BINGET, GET
			var id uint64
			if id, err = d.memoID(at, op); err == nil {
				err = d.recall(at, op, id)
			}
		default:
			return &PickleError{Offset: at, Op: op, Refused: true, Reason: "refused: " + refusedWhy(op)}
		}
		if err != nil {
			return err
		}
	}
}

// lengthWidth is the size of the length that precedes a string or bytes argument.
func lengthWidth(op byte) int {
	switch op {
	case 0x8c, 'U', 'C':
		return 1
	case 0x8d, 0x8e, 0x96:
		return 8
	}
	return 4
}

// floor is the lowest stack index the current mark leaves usable.
func (d *decoder) floor() int {
	if len(d.marks) == 0 {
		return 0
	}
	return d.marks[len(d.marks)-1]
}

func (d *decoder) textInt(at int, op byte, s string) error {
	s = strings.TrimSuffix(strings.TrimSpace(s), "L")
	switch {
	case op == 'I' && s == "01":
		return d.push(at, op, true)
	case op == 'I' && s == "00":
		return d.push(at, op, false)
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return d.push(at, op, v)
	}
	if len(s) > 3*maxIntBytes {
		return d.fail(at, op, "integer of %d digits", len(s))
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return d.fail(at, op, "not an integer: %q", s)
	}
	return d.push(at, op, n)
}

// memoID reads a memo index: one byte (BINPUT, BINGET), four (LONG_BINPUT, LONG_BINGET) or
// a line of text (PUT, GET).
func (d *decoder) memoID(at int, op byte) (uint64, error) {
	switch op {
	case 'q', 'h':
		return d.le(at, op, 1)
	case 'r', 'j':
		return d.le(at, op, 4)
	}
	s, err := d.line(at, op)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return 0, d.fail(at, op, "not a memo index: %q", s)
	}
	return v, nil
}

// salvage closes every container still being filled, innermost first, and returns the
// outermost value: for a dict or list whose SETITEMS or APPENDS never came, the items that
// were read. A key left without its value is dropped.
func (d *decoder) salvage() any {
	for len(d.marks) > 0 {
		m := d.marks[len(d.marks)-1]
		d.marks = d.marks[:len(d.marks)-1]
		items := append([]any(nil), d.stack[m:]...)
		d.stack = d.stack[:m]
		if len(d.stack) > 0 {
			switch t := d.stack[len(d.stack)-1].(type) {
			case *Dict:
				for k := 0; k+1 < len(items); k += 2 {
					if hashable(items[k]) {
						t.set(items[k], items[k+1])
					}
				}
				continue
			case *List:
				t.Items = append(t.Items, items...)
				continue
			}
		}
		d.stack = append(d.stack, Tuple(items))
	}
	if len(d.stack) == 0 {
		return nil
	}
	return d.stack[0]
}

// typeName is the Python name of a value's type, for errors and notes.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case Bytes:
		return "bytes"
	case Tuple:
		return "tuple"
	case *List:
		return "list"
	case *Dict:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}
