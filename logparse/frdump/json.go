package frdump

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// JSONError says why a JSON dump could not be read to its end.
type JSONError struct {
	Offset    int64
	Reason    string
	Truncated bool // the input ended inside a value
}

func (e *JSONError) Error() string {
	if e.Truncated {
		return fmt.Sprintf("JSON is truncated at offset %d: %s", e.Offset, e.Reason)
	}
	return fmt.Sprintf("JSON at offset %d: %s", e.Offset, e.Reason)
}

// Is lets errors.Is(err, ErrTruncated) match a truncated JSON dump too.
func (e *JSONError) Is(target error) bool { return target == ErrTruncated && e.Truncated }

// DecodeJSON reads a JSON document into the same plain values DecodePickle builds (objects
// become *Dict with their keys in document order, arrays *List, numbers int64 when whole
// and in range, else float64). On failure it returns what it had read, every open object
// and array closed, with a *JSONError.
func DecodeJSON(b []byte, lim Limits) (any, error) {
	lim = lim.withDefaults()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type open struct {
		v      any // *Dict or *List
		key    string
		hasKey bool
	}
	var stack []open
	var root any
	items, done := 0, false
	add := func(v any) {
		if len(stack) == 0 {
			root, done = v, true
			return
		}
		top := &stack[len(stack)-1]
		switch c := top.v.(type) {
		case *List:
			c.Items = append(c.Items, v)
		case *Dict:
			if !top.hasKey {
				// A key: the decoder hands keys over as strings.
				if s, ok := v.(string); ok {
					top.key, top.hasKey = s, true
				}
				return
			}
			c.set(top.key, v)
			top.hasKey = false
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if len(stack) > 0 || !done {
				return root, &JSONError{Offset: dec.InputOffset(), Truncated: true, Reason: "the input ended inside a value"}
			}
			return root, nil
		}
		if err != nil {
			trunc := errors.Is(err, io.ErrUnexpectedEOF)
			return root, &JSONError{Offset: dec.InputOffset(), Truncated: trunc, Reason: err.Error()}
		}
		items++
		if items > lim.MaxItems {
			return root, &JSONError{Offset: dec.InputOffset(), Reason: fmt.Sprintf("more than %d values: the dump is larger than the reader's bound", lim.MaxItems)}
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= lim.MaxMarks {
					return root, &JSONError{Offset: dec.InputOffset(), Reason: fmt.Sprintf("nested deeper than %d", lim.MaxMarks)}
				}
				var c any = &Dict{}
				if t == '[' {
					c = &List{}
				}
				add(c)
				stack = append(stack, open{v: c})
			default:
				stack = stack[:len(stack)-1]
			}
		case json.Number:
			add(jsonNumber(t))
		default: // string, bool, nil
			add(t)
		}
		if len(stack) == 0 && done {
			// One document; trailing text is not read.
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				return root, &JSONError{Offset: dec.InputOffset(), Reason: "text after the JSON document"}
			}
			return root, nil
		}
	}
}

func jsonNumber(n json.Number) any {
	if v, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return v
	}
	f, _ := strconv.ParseFloat(string(n), 64)
	return f
}
