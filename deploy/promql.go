// Package deploy holds what ships the watchdog into Kubernetes, Slurm and a monitoring
// stack (Helm chart, systemd units, Slurm scripts, Grafana dashboards, Prometheus rules),
// and the helpers its tests use to check those files against the metrics the binaries
// really export: a PromQL metric-name extractor and loaders for dashboards and rules.
package deploy

import (
	"fmt"
	"strings"
)

// aggregations are PromQL aggregation operators: followed by `by`, `without` or `(`.
var aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true,
	"stddev": true, "stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true}

// grouping keywords take a parenthesised list of label names.
var grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true}

// keywords are never metric names.
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"atan2": true, "inf": true, "nan": true}

// MetricNames returns the metric names an expression selects, in order of first use: the
// identifiers that are not functions, aggregations, keywords, label names (inside {...}
// and grouping lists), durations (inside [...] and after offset) or Grafana variables
// ($var, ${var}). A selector {__name__="x"} names x. It does not check the grammar
// beyond balanced brackets and terminated strings; promtool does that.
func MetricNames(expr string) ([]string, error) {
	lx := lexer{s: expr}
	var out []string
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	// parens holds, per open '(', whether it opened a label list.
	var parens []bool
	for {
		tok, err := lx.next()
		if err != nil {
			return nil, err
		}
		switch tok.kind {
		case tokEOF:
			if len(parens) > 0 {
				return nil, fmt.Errorf("unclosed '(' in %q", expr)
			}
			return out, nil
		case tokOpen:
			parens = append(parens, false)
		case tokClose:
			if len(parens) == 0 {
				return nil, fmt.Errorf("unbalanced ')' in %q", expr)
			}
			parens = parens[:len(parens)-1]
		case tokBraces:
			if tok.text != "" {
				add(tok.text)
			}
		case tokIdent:
			if len(parens) > 0 && parens[len(parens)-1] {
				continue // a label name in by (...) / on (...)
			}
			name := tok.text
			next := lx.peek()
			lower := strings.ToLower(name)
			switch {
			case grouping[lower]:
				if next == '(' {
					if _, err := lx.next(); err != nil {
						return nil, err
					}
					parens = append(parens, true)
				}
			case keywords[lower]:
				if lower == "offset" {
					lx.skipDuration()
				}
			case aggregations[lower] && (next == '(' || lx.peekWord() == "by" || lx.peekWord() == "without"):
			case next == '(':
				// a function call
			default:
				add(name)
			}
		}
	}
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	tokOpen
	tokClose
	tokBraces // a whole {...} matcher list; text is its __name__ if it names one
	tokOther
)

type token struct {
	kind tokKind
	text string
}

type lexer struct {
	s string
	i int
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace skips blanks and # comments.
func (l *lexer) skipSpace() {
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case isSpace(c):
			l.i++
		case c == '#':
			for l.i < len(l.s) && l.s[l.i] != '\n' {
				l.i++
			}
		default:
			return
		}
	}
}

// peek returns the next significant byte without consuming it (0 at the end).
func (l *lexer) peek() byte {
	save := l.i
	l.skipSpace()
	var c byte
	if l.i < len(l.s) {
		c = l.s[l.i]
	}
	l.i = save
	return c
}

// peekWord returns the next identifier, lower-cased, without consuming it.
func (l *lexer) peekWord() string {
	save := l.i
	defer func() { l.i = save }()
	l.skipSpace()
	j := l.i
	for j < len(l.s) && isIdentChar(l.s[j]) {
		j++
	}
	return strings.ToLower(l.s[l.i:j])
}

// skipDuration consumes an offset's duration, e.g. 5m, -1h30m or $__interval.
func (l *lexer) skipDuration() {
	l.skipSpace()
	if l.i < len(l.s) && l.s[l.i] == '-' {
		l.i++
	}
	if l.i < len(l.s) && l.s[l.i] == '$' {
		_ = l.skipVariable()
		return
	}
	for l.i < len(l.s) && (isIdentChar(l.s[l.i]) || l.s[l.i] == '.') {
		l.i++
	}
}

// skipString consumes a quoted string starting at l.i.
func (l *lexer) skipString() error {
	q := l.s[l.i]
	start := l.i
	l.i++
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == '\\' && q != '`':
			l.i += 2
			continue
		case c == q:
			l.i++
			return nil
		}
		l.i++
	}
	return fmt.Errorf("unterminated string at offset %d", start)
}

// skipVariable consumes a Grafana variable: $name, ${name} or ${name:format}.
func (l *lexer) skipVariable() error {
	start := l.i
	l.i++ // $
	if l.i < len(l.s) && l.s[l.i] == '{' {
		end := strings.IndexByte(l.s[l.i:], '}')
		if end < 0 {
			return fmt.Errorf("unterminated ${ at offset %d", start)
		}
		l.i += end + 1
		return nil
	}
	for l.i < len(l.s) && isIdentChar(l.s[l.i]) {
		l.i++
	}
	return nil
}

// skipBalanced consumes from an opening bracket to its match, skipping strings; for a
// '{' it returns the value of an __name__="..." matcher, if any.
func (l *lexer) skipBalanced(open, close byte) (string, error) {
	start := l.i
	depth := 0
	var name string
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if err := l.skipString(); err != nil {
				return "", err
			}
			continue
		case c == open:
			depth++
		case c == close:
			depth--
			if depth == 0 {
				l.i++
				return name, nil
			}
		case open == '{' && strings.HasPrefix(l.s[l.i:], "__name__"):
			j := l.i + len("__name__")
			for j < len(l.s) && isSpace(l.s[j]) {
				j++
			}
			if j+1 < len(l.s) && l.s[j] == '=' && l.s[j+1] != '~' {
				j++
				for j < len(l.s) && isSpace(l.s[j]) {
					j++
				}
				if j < len(l.s) && (l.s[j] == '"' || l.s[j] == '\'') {
					q := l.s[j]
					if k := strings.IndexByte(l.s[j+1:], q); k >= 0 {
						name = l.s[j+1 : j+1+k]
					}
				}
			}
		}
		l.i++
	}
	return "", fmt.Errorf("unclosed %q at offset %d", open, start)
}

func (l *lexer) next() (token, error) {
	for {
		l.skipSpace()
		if l.i >= len(l.s) {
			return token{kind: tokEOF}, nil
		}
		c := l.s[l.i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if err := l.skipString(); err != nil {
				return token{}, err
			}
			return token{kind: tokOther}, nil
		case c == '$':
			if err := l.skipVariable(); err != nil {
				return token{}, err
			}
			return token{kind: tokOther}, nil
		case c == '{':
			name, err := l.skipBalanced('{', '}')
			if err != nil {
				return token{}, err
			}
			return token{kind: tokBraces, text: name}, nil
		case c == '[':
			if _, err := l.skipBalanced('[', ']'); err != nil {
				return token{}, err
			}
			return token{kind: tokOther}, nil
		case c == '}' || c == ']':
			return token{}, fmt.Errorf("unbalanced %q at offset %d", c, l.i)
		case c == '(':
			l.i++
			return token{kind: tokOpen}, nil
		case c == ')':
			l.i++
			return token{kind: tokClose}, nil
		case c >= '0' && c <= '9' || (c == '.' && l.i+1 < len(l.s) && l.s[l.i+1] >= '0' && l.s[l.i+1] <= '9'):
			// numbers, hex, 1e6, durations: letters and digits glued to a leading digit
			for l.i < len(l.s) && (isIdentChar(l.s[l.i]) || l.s[l.i] == '.') {
				l.i++
			}
			return token{kind: tokOther}, nil
		case isIdentStart(c):
			j := l.i
			for j < len(l.s) && isIdentChar(l.s[j]) {
				j++
			}
			t := token{kind: tokIdent, text: l.s[l.i:j]}
			l.i = j
			return t, nil
		default:
			l.i++
			return token{kind: tokOther}, nil
		}
	}
}
