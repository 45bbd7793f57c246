package alert

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ncclwatch/watchdog/incident"
)

// Text that came from logs (hosts, summaries, evidence, op names) is untrusted: a log line
// must not be able to mention @channel, inject a link, or fake formatting in a page.

// escapeMrkdwn makes untrusted text inert inside a Slack mrkdwn text object:
//   - &, <, > become entities, so no <!channel>, <@U…>, <!here> or <url|label> survives;
//   - *, ~ and ` become look-alikes that Slack does not format;
//   - _ becomes a look-alike where it could open or close italics (next to a non-word
//     character), and stays inside identifiers such as NCCL_DEBUG or mlx5_1;
//   - @channel, @here and @everyone lose their @;
//   - control characters (newlines included) become spaces: one log line stays one line.
func escapeMrkdwn(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	b.Grow(len(s) + 8)
	runes := []rune(s)
	for i, r := range runes {
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '*':
			b.WriteRune('∗') // U+2217 ASTERISK OPERATOR
		case r == '~':
			b.WriteRune('∼') // U+223C TILDE OPERATOR
		case r == '`':
			b.WriteRune('ˋ') // U+02CB MODIFIER LETTER GRAVE ACCENT
		case r == '_' && !(isWord(runes, i-1) && isWord(runes, i+1)):
			b.WriteRune('＿') // U+FF3F FULLWIDTH LOW LINE
		case r == '@' && broadcastMention(runes[i+1:]):
			b.WriteRune('＠') // U+FF20 FULLWIDTH COMMERCIAL AT
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029':
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isWord(rs []rune, i int) bool {
	if i < 0 || i >= len(rs) {
		return false
	}
	return unicode.IsLetter(rs[i]) || unicode.IsDigit(rs[i])
}

func broadcastMention(rest []rune) bool {
	for _, w := range []string{"channel", "here", "everyone"} {
		if len(rest) >= len(w) && strings.EqualFold(string(rest[:len(w)]), w) {
			return true
		}
	}
	return false
}

// plainText makes untrusted text safe for a plain_text object or a one-line console or
// PagerDuty summary: control characters become spaces, and <, > and & become look-alikes
// (plain_text is not parsed, but the same string also feeds notification previews).
func plainText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	runes := []rune(s)
	for i, r := range runes {
		switch {
		case r == '<':
			b.WriteRune('‹')
		case r == '>':
			b.WriteRune('›')
		case r == '&':
			b.WriteRune('＆')
		case r == '@' && broadcastMention(runes[i+1:]):
			b.WriteRune('＠')
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029':
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// oneLine replaces control characters by spaces (console output, JSON is escaped anyway).
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// truncate cuts s to at most max characters (runes), ending with "…" when cut.
func truncate(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	if max <= 1 {
		return string([]rune(s)[:max])
	}
	return string([]rune(s)[:max-1]) + "…"
}

// truncateEscaped is truncate for escaped mrkdwn: it never cuts an entity (&amp;) in half.
func truncateEscaped(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	cut := string([]rune(s)[:max-1])
	if amp := strings.LastIndexByte(cut, '&'); amp >= 0 && amp >= len(cut)-5 && !strings.Contains(cut[amp:], ";") {
		cut = cut[:amp]
	}
	return cut + "…"
}

// kindTitle names a kind for people.
func kindTitle(k incident.Kind) string {
	switch k {
	case incident.KindMismatch:
		return "Collective mismatch"
	case incident.KindHang:
		return "Hang"
	case incident.KindP2PMismatch:
		return "Send/recv mismatch"
	case incident.KindCrash:
		return "Rank crashed"
	case incident.KindStraggler:
		return "Straggler"
	case incident.KindLink:
		return "Slow or down link"
	case incident.KindGPU:
		return "GPU fault"
	case incident.KindLostNode:
		return "Lost node"
	case incident.KindStuckInFlight:
		return "Collective stuck in flight"
	case incident.KindOrderInversion:
		return "Collectives called in another order"
	case incident.KindMonitoring:
		return "Monitoring gap"
	case incident.KindConfig:
		return "Job set-up error"
	case incident.KindNCCLWarning:
		return "NCCL warning"
	case incident.KindNode:
		return "Bad node part across jobs"
	default:
		return string(k)
	}
}

// culpritText describes a culprit, e.g. "rank 3 on node-017 (pid 4242, GPU 3)". The
// result is raw: escape it for the destination.
func culpritText(c incident.Culprit) string {
	var b strings.Builder
	if c.Rank >= 0 {
		b.WriteString("rank " + strconv.Itoa(c.Rank))
		if c.Host != "" {
			b.WriteString(" on ")
		}
	}
	b.WriteString(c.Host)
	var extra []string
	if c.PID > 0 {
		extra = append(extra, "pid "+strconv.Itoa(c.PID))
	}
	if c.GPU != "" {
		extra = append(extra, "GPU "+c.GPU)
	}
	if c.Port != "" {
		extra = append(extra, "port "+c.Port)
	}
	if len(extra) > 0 {
		b.WriteString(" (" + strings.Join(extra, ", ") + ")")
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return b.String()
}

// shortCulprit is the culprit for a title: "rank 3 on node-017", "node-017 port mlx5_1:1".
func shortCulprit(inc incident.Incident) string {
	if len(inc.Culprits) == 0 {
		return ""
	}
	c := inc.Culprits[0]
	s := c.Host
	if c.Rank >= 0 {
		s = "rank " + strconv.Itoa(c.Rank)
		if c.Host != "" {
			s += " on " + c.Host
		}
	} else if c.Port != "" {
		s += " port " + c.Port
	} else if c.GPU != "" {
		s += " GPU " + c.GPU
	}
	if n := len(inc.Culprits) - 1; n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	return s
}

// opText renders an op signature, e.g. "AllReduce(count 1048576, bf16, sum)".
func opText(op incident.Op) string {
	parts := []string{"count " + strconv.FormatUint(op.Count, 10)}
	if op.Datatype != "" {
		parts = append(parts, op.Datatype)
	}
	if op.RedOp != "" {
		parts = append(parts, op.RedOp)
	}
	if op.Root != 0 {
		parts = append(parts, "root "+strconv.Itoa(op.Root))
	}
	return op.Op + "(" + strings.Join(parts, ", ") + ")"
}

// opLines renders an incident's ops, at most max lines (plus one saying how many more):
// per rank ("rank 3: AllReduce(...)"), or for a bounded incident of a large job per
// signature ("AllReduce(...) on 99,999 ranks, e.g. 0 1 2 4 5").
func opLines(inc incident.Incident, max int) []string {
	var out []string
	if len(inc.OpGroups) > 0 {
		for i, g := range inc.OpGroups {
			if i == max {
				out = append(out, fmt.Sprintf("…and %d more signatures", len(inc.OpGroups)-i))
				break
			}
			l := truncate(opText(g.Op), 200) + " on " + plural(g.Ranks, "rank")
			if len(g.Examples) > 0 && len(g.Examples) < g.Ranks {
				l += ", e.g. " + truncate(strings.Join(g.Examples, " "), 200)
			} else if len(g.Examples) > 0 {
				l += ": " + truncate(strings.Join(g.Examples, " "), 200)
			}
			out = append(out, l)
		}
		if om := inc.Omitted; om != nil && om.OpGroups > 0 {
			out = append(out, fmt.Sprintf("…and %s on %s not listed", plural(om.OpGroups, "other signature"), plural(om.OpRanks, "rank")))
		}
		return out
	}
	keys := sortedOpKeys(inc.Ops)
	for i, k := range keys {
		if i == max {
			out = append(out, fmt.Sprintf("…and %d more", len(keys)-i))
			break
		}
		out = append(out, truncate(k, 100)+": "+truncate(opText(inc.Ops[k]), 200))
	}
	return out
}

// plural says "1 rank", "99,999 ranks".
func plural(n int, what string) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && n >= 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if n == 1 {
		return s + " " + what
	}
	return s + " " + what + "s"
}

func sortedOpKeys(ops map[string]incident.Op) []string {
	keys := make([]string, 0, len(ops))
	for k := range ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func severityLabel(s incident.Severity) string {
	if s == "" {
		return "UNKNOWN"
	}
	return strings.ToUpper(string(s))
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func fmtDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
