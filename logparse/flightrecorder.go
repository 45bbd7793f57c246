package logparse

import (
	"bytes"

	"github.com/ncclwatch/watchdog/snapshot"
)

// parseFlightRecorder reads the report of PyTorch's Flight Recorder analyzer (python -m
// torch.distributed.flight_recorder.fr_trace, torchfrtrace), which compares the ranks'
// dumps of their recent collectives. It prints, per collective it found wrong, a header
// ("Collective 39 at entry 38 errors", 2.8+ "Collective sequence number: 39 has errors",
// "Not all ranks joining collective 5 at entry 4", 2.8+ "Not all ranks joining collective,
// sequence number: 5", 2.5's one line "Not all ranks joining collective for group G:desc
// collective NAME Missing ranks are {1} ..."), then key: value lines, of which "error msg:
// Culprit rank R; Error type: T, ..." and "missing ranks: {..}" name ranks. It reports
// whether b was one of those lines.
func parseFlightRecorder(b []byte, l *Line) bool {
	b = trimSpace(b)
	switch {
	case hasPrefix(b, "error msg: Culprit rank "):
		l.Kind = KindFRCulprit
		l.Text = b[len("error msg: "):]
	case hasPrefix(b, "missing ranks: {"):
		l.Kind = KindFRMissing
		l.Text = b[len("missing ranks: "):]
	case hasPrefix(b, "Not all ranks joining collective"):
		if i := index(b, "Missing ranks are {"); i > 0 {
			l.Kind = KindFRMissing
			l.Code = -1
			l.Text = b[i+len("Missing ranks are "):]
			return true
		}
		l.Kind = KindFRCollective
		l.Code = frSeq(b[len("Not all ranks joining collective"):])
	case hasPrefix(b, "Collective ") && (bytes.HasSuffix(b, bytesOf(" errors")) || bytes.HasSuffix(b, bytesOf(" has errors"))):
		l.Kind = KindFRCollective
		l.Code = frSeq(b[len("Collective "):])
		if l.Code < 0 {
			// "Collective <anything> errors" without a number is not the analyzer's.
			l.Kind = KindUnknown
			return false
		}
	default:
		return false
	}
	l.Msg = b
	return true
}

// frSeq reads the sequence number after a header's words: " 39 at entry 38", ", sequence
// number: 39", "sequence number: 39 has errors"; -1 when there is none.
func frSeq(b []byte) int {
	if i := index(b, "sequence number: "); i >= 0 {
		b = b[i+len("sequence number: "):]
	}
	s := scanner{b: trimSpace(b)}
	v, ok := s.dec()
	if !ok || v > 1<<40 {
		return -1
	}
	return int(v)
}

// frRanks reads the ranks a report line names, each after marker ("Culprit rank "), or, with
// no marker, the numbers of a Python set ("{1, 5, 9}"). It keeps the first
// snapshot.MaxFRRanks, distinct, and says how many distinct ranks it read in all.
func frRanks(b []byte, marker string) (ranks []int, n int) {
	if marker == "" {
		if j := bytes.IndexByte(b, '}'); j >= 0 {
			b = b[:j]
		}
	}
	seen := map[int]bool{}
	for len(b) > 0 {
		if marker != "" {
			i := index(b, marker)
			if i < 0 {
				break
			}
			b = b[i+len(marker):]
		} else {
			i := bytes.IndexAny(b, "0123456789")
			if i < 0 {
				break
			}
			b = b[i:]
		}
		s := scanner{b: b}
		v, ok := s.dec()
		// A run of digits too long for dec is skipped whole, so the loop always advances.
		b = bytes.TrimLeft(s.rest(), "0123456789")
		if !ok || v > 1<<30 || seen[int(v)] {
			continue
		}
		seen[int(v)] = true
		n++
		if len(ranks) < snapshot.MaxFRRanks {
			ranks = append(ranks, int(v))
		}
	}
	return ranks, n
}

// frFirstError is what the first culprit's error says: "SIZE_OR_SYNTAX_MISMATCH, Expected
// input sizes: '[[1025]]' does not match found input sizes: '[[262144]]'".
func frFirstError(b []byte) []byte {
	i := index(b, "; ")
	if i < 0 {
		return nil
	}
	b = b[i+2:]
	b = bytes.TrimPrefix(b, bytesOf("Error type: "))
	b = bytes.TrimPrefix(b, bytesOf("MatchState."))
	if j := index(b, ", Culprit rank "); j >= 0 {
		b = b[:j]
	}
	return trimSpace(b)
}
