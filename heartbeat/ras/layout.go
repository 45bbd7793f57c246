package ras

import (
	"bytes"
	"regexp"
)

// A text report saved into a console or posted in a thread sits between other lines: the
// PyTorch error that made someone run ncclras, the job's output after it. A reader of such
// a file ends the report at the first line that cannot be part of it and reads that line
// as a log line. The shapes below are those client_support.cc prints (2.24 to 2.30): its
// headers at the margin, its table rows and prose indented. They are strict on purpose: a
// log line swallowed into a report is lost, a report line handed back is only uncounted.
var (
	reStartLine = regexp.MustCompile(`^NCCL version \S+ compiled with CUDA `)
	reMargin    = regexp.MustCompile(`^(?:CUDA runtime version \d+|Job summary$|Communicators\.\.\.|Errors$|Warnings$|INCOMPLETE$|DEAD$|TIMEOUT$|The outlier nodes?:$|Group +Comms +Nodes|\(total\) |No communicator data collected|#\d+-\d+ \([0-9a-fA-F]{1,16}\) [A-Z,]+$|=+$)`)
	// Indented prose: missing, dead and outlier processes and ranks, count and status
	// groups, errors, collection warnings.
	reBody = regexp.MustCompile(`^(?:Missing communicator data from \d+ |Process \d+ on node |Rank \d+ |Node \S+ running process|\[could not find information on |\d+ ranks? (?:have|has|reported) |\d+ job process(?:es)? (?:is|are) |Communicator ranks have different |Encountered \d+ communication timeout|(?:Initialization|Asynchronous) errors? on \d+ rank)`)
)

// tableWords are the words of the summary tables' headings and status columns.
var tableWords = map[string]bool{
	"Nodes": true, "Processes": true, "GPUs": true, "per": true, "node": true, "process": true,
	"(total)": true, "#": true, "in": true, "group": true, "comm": true, "Comms": true, "Ranks": true,
	"Status": true, "Errors": true,
}

// TextStart reports whether a line opens a text STATUS reply: NCCL's version as the
// report's first line prints it (a log's "NCCL version 2.x+cuda" line has no "compiled").
func TextStart(line []byte) bool {
	// Every line of a log is asked: the literal prefix turns nearly all away before the regexp.
	return bytes.HasPrefix(line, []byte("NCCL version ")) && reStartLine.Match(bytes.TrimRight(line, "\r\n"))
}

// InText reports whether a line can be part of a text STATUS reply.
func InText(line []byte) bool {
	l := bytes.TrimRight(line, " \t\r\n")
	if len(l) == 0 {
		return true
	}
	if reStartLine.Match(l) {
		// The next report: the caller starts it anew.
		return false
	}
	s := bytes.TrimLeft(l, " ")
	if len(s) == len(l) {
		// Groups numbered 10000 and up push the table row to the margin.
		return reMargin.Match(s) || reTableRow.Match(s)
	}
	return reBody.Match(s) || tableLine(s)
}

// tableLine reports a row or heading of the job summary or communicator tables: numbers,
// ranges ("1-2"), states and heading words only.
func tableLine(s []byte) bool {
	for _, w := range bytes.Fields(s) {
		if tableWords[string(w)] || isCount(w) || isState(w) {
			continue
		}
		return false
	}
	return true
}

func isCount(w []byte) bool {
	digits := 0
	for i, c := range w {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '-' && i > 0 && i < len(w)-1:
		default:
			return false
		}
	}
	return digits > 0
}

// isState reports a status or error column value: upper-case words joined by commas.
func isState(w []byte) bool {
	for _, c := range w {
		if (c < 'A' || c > 'Z') && c != ',' {
			return false
		}
	}
	return len(w) >= 2
}
