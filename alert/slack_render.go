package alert

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/ncclwatch/watchdog/incident"
)

// Slack's limits (https://api.slack.com/reference/block-kit/blocks) and our own, smaller
// ones that keep a page readable.
const (
	slackHeaderMax   = 150
	slackSectionMax  = 3000
	slackFieldMax    = 2000
	slackMaxFields   = 10
	slackMaxBlocks   = 50
	slackFallbackMax = 3000

	maxCulpritLines    = 10
	maxOpLines         = 16
	maxEvidenceLines   = 15
	maxEvidenceLineLen = 400
	maxGroupLines      = 30
	maxGroupSummaryLen = 160
	maxUpdateEvidence  = 5
)

func mrkdwnText(s string) *slack.TextBlockObject {
	// verbatim: Slack must not auto-link or auto-mention anything in the text.
	return slack.NewTextBlockObject(slack.MarkdownType, truncateEscaped(s, slackSectionMax), false, true)
}

func plainTextObject(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, true, false)
}

func section(s string) *slack.SectionBlock { return slack.NewSectionBlock(mrkdwnText(s), nil, nil) }

func header(s string) *slack.HeaderBlock {
	return slack.NewHeaderBlock(plainTextObject(truncate(plainText(s), slackHeaderMax)))
}

// slackLink is a link whose URL comes from configuration (validated by Links.Validate) and
// whose label is ours.
func slackLink(u, label string) string {
	return "<" + strings.ReplaceAll(u, "&", "&amp;") + "|" + label + ">"
}

func statusTag(inc incident.Incident, ev Event) string {
	if ev == EventResolve || inc.State == incident.StateResolved {
		return "[RESOLVED]"
	}
	return "[" + severityLabel(inc.Severity) + "]"
}

func incidentTitle(inc incident.Incident) string {
	t := kindTitle(inc.Kind)
	if c := shortCulprit(inc); c != "" {
		t += ": " + c
	}
	return t
}

// incidentBlocks renders one incident as a full message (the original post, or its
// resolved rewrite).
func incidentBlocks(inc incident.Incident, ev Event, links Links) []slack.Block {
	blocks := []slack.Block{header(statusTag(inc, ev) + " " + incidentTitle(inc))}

	var lead strings.Builder
	if ev == EventResolve {
		lead.WriteString("*Resolved*")
		if inc.ResolvedAt != nil {
			lead.WriteString(" at " + fmtTime(*inc.ResolvedAt))
			if !inc.OpenedAt.IsZero() {
				lead.WriteString(" after " + fmtDuration(inc.ResolvedAt.Sub(inc.OpenedAt)))
			}
		}
		lead.WriteString(". ")
	}
	if inc.Summary != "" {
		lead.WriteString(escapeMrkdwn(inc.Summary))
	} else {
		lead.WriteString(escapeMrkdwn(kindTitle(inc.Kind)) + " in job " + escapeMrkdwn(inc.Job))
	}
	blocks = append(blocks, section(lead.String()))

	if len(inc.Culprits) > 0 {
		blocks = append(blocks, section(culpritsText(inc.Culprits)))
	}
	if f := incidentFields(inc); len(f) > 0 {
		blocks = append(blocks, slack.NewSectionBlock(nil, f, nil))
	}
	if len(inc.Ops) > 0 || len(inc.OpGroups) > 0 {
		blocks = append(blocks, section(opsText(inc)))
	}
	if len(inc.Evidence) > 0 {
		blocks = append(blocks, section(evidenceText(inc.Evidence, maxEvidenceLines)))
	}
	return appendContext(blocks, inc.Job, inc.ID, inc.Kind, inc.Revision, links)
}

func culpritsText(cs []incident.Culprit) string {
	if len(cs) == 1 {
		return "*Culprit*\n" + escapeMrkdwn(culpritText(cs[0]))
	}
	var b strings.Builder
	b.WriteString("*Culprits*")
	for i, c := range cs {
		if i == maxCulpritLines {
			fmt.Fprintf(&b, "\n…and %d more", len(cs)-i)
			break
		}
		b.WriteString("\n• " + escapeMrkdwn(culpritText(c)))
	}
	return b.String()
}

func incidentFields(inc incident.Incident) []*slack.TextBlockObject {
	var f []*slack.TextBlockObject
	add := func(name, value string) {
		if value != "" && len(f) < slackMaxFields {
			f = append(f, slack.NewTextBlockObject(slack.MarkdownType,
				truncateEscaped("*"+name+"*\n"+value, slackFieldMax), false, true))
		}
	}
	add("Job", escapeMrkdwn(inc.Job))
	add("Communicator", escapeMrkdwn(inc.Comm))
	if inc.Seq > 0 {
		add("Position", "collective #"+strconv.FormatInt(inc.Seq, 10))
	}
	if inc.Victims > 0 {
		add("Waiting ranks", strconv.Itoa(inc.Victims))
	}
	if inc.LagSeconds > 0 {
		add("Median lag", strconv.FormatFloat(inc.LagSeconds, 'f', 2, 64)+" s")
	}
	add("Opened", fmtTime(inc.OpenedAt))
	if !inc.FaultAt.IsZero() {
		add("Fault began", fmtTime(inc.FaultAt))
	}
	return f
}

func opsText(inc incident.Incident) string {
	var b strings.Builder
	b.WriteString("*Op signatures")
	if inc.Seq > 0 {
		b.WriteString(" at collective #" + strconv.FormatInt(inc.Seq, 10))
	}
	b.WriteString("*")
	for _, l := range opLines(inc, maxOpLines) {
		b.WriteString("\n• " + escapeMrkdwn(l))
	}
	return b.String()
}

// evidenceText lists evidence lines as bullets, each and all capped, never more than a
// section holds.
func evidenceText(lines []string, maxLines int) string {
	var b strings.Builder
	b.WriteString("*Evidence*")
	budget := slackSectionMax - 40
	for i, l := range lines {
		if i == maxLines || b.Len() >= budget {
			fmt.Fprintf(&b, "\n…and %d more", len(lines)-i)
			break
		}
		line := "\n• " + truncateEscaped(escapeMrkdwn(l), maxEvidenceLineLen)
		if b.Len()+len(line) > budget {
			fmt.Fprintf(&b, "\n…and %d more", len(lines)-i)
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// appendContext adds the line of links and identity under a message, unless it would be
// empty: Slack refuses a whole message for one empty text object.
func appendContext(blocks []slack.Block, job, id string, kind incident.Kind, revision int, links Links) []slack.Block {
	var parts []string
	// A link cut by truncation would show as raw markup: one that does not fit whole
	// (a dashboard URL that carries an absurd job name) is left out, with room kept for
	// the identity that follows.
	addLink := func(u, label string) {
		l := slackLink(u, label)
		if utf8.RuneCountInString(strings.Join(append(parts, l), " · ")) <= slackSectionMax-200 {
			parts = append(parts, l)
		}
	}
	if u := links.DashboardURL(job, id, kind); u != "" {
		addLink(u, "Dashboard")
	}
	if u := links.RunbookURL(kind); u != "" && id != "" {
		addLink(u, "Runbook")
	}
	if id != "" {
		parts = append(parts, "incident "+escapeMrkdwn(id)+" · revision "+strconv.Itoa(revision))
	}
	if len(parts) == 0 {
		return blocks
	}
	return append(blocks, slack.NewContextBlock("", mrkdwnText(strings.Join(parts, " · "))))
}

// incidentFallback is the message's top-level text: notifications and screen readers.
func incidentFallback(inc incident.Incident, ev Event) string {
	s := statusTag(inc, ev) + " " + escapeMrkdwn(incidentTitle(inc))
	if inc.Job != "" {
		s += " in job " + escapeMrkdwn(inc.Job)
	}
	if inc.Summary != "" {
		s += ": " + escapeMrkdwn(inc.Summary)
	}
	return truncateEscaped(s, slackFallbackMax)
}

// sortIncidents orders a group: most severe first, then oldest, then by id.
func sortIncidents(incs []incident.Incident) {
	sort.SliceStable(incs, func(i, j int) bool {
		a, b := incs[i], incs[j]
		if a.Severity.Rank() != b.Severity.Rank() {
			return a.Severity.Rank() < b.Severity.Rank()
		}
		if !a.OpenedAt.Equal(b.OpenedAt) {
			return a.OpenedAt.Before(b.OpenedAt)
		}
		return a.ID < b.ID
	})
}

func worstSeverity(incs []incident.Incident) incident.Severity {
	w := incident.SeverityInfo
	for _, inc := range incs {
		if inc.Severity.Rank() < w.Rank() {
			w = inc.Severity
		}
	}
	return w
}

// groupLine is one incident in a list: "• *CRITICAL* Hang: rank 3 on n1 · job j · summary".
func groupLine(inc incident.Incident, ev Event, showJob bool) string {
	tag := "*" + severityLabel(inc.Severity) + "*"
	if ev == EventResolve {
		tag = "*RESOLVED*"
	}
	s := "• " + tag + " " + escapeMrkdwn(incidentTitle(inc))
	if showJob && inc.Job != "" {
		s += " · job " + escapeMrkdwn(inc.Job)
	}
	if inc.Summary != "" {
		s += " · " + truncateEscaped(escapeMrkdwn(inc.Summary), maxGroupSummaryLen)
	}
	return s + " (" + escapeMrkdwn(inc.ID) + ")"
}

// groupBlocks renders a burst of incidents as one message: counts by kind and job, then
// the most severe incidents, then how many more there are.
func groupBlocks(incs []incident.Incident, ev Event, links Links) []slack.Block {
	incs = append([]incident.Incident(nil), incs...)
	sortIncidents(incs)
	title := fmt.Sprintf("[%s] %d new incidents", severityLabel(worstSeverity(incs)), len(incs))
	if ev == EventResolve {
		title = fmt.Sprintf("[RESOLVED] %d incidents", len(incs))
	}
	blocks := []slack.Block{header(title), section(groupOverview(incs))}
	blocks = append(blocks, listSections(incs, ev)...)
	if jobs := distinctJobs(incs); len(jobs) == 1 {
		blocks = appendContext(blocks, jobs[0], "", "", 0, links)
	}
	if len(blocks) > slackMaxBlocks {
		blocks = blocks[:slackMaxBlocks]
	}
	return blocks
}

// listSections lists up to maxGroupLines incidents in sections that respect Slack's limit.
func listSections(incs []incident.Incident, ev Event) []slack.Block {
	var blocks []slack.Block
	showJob := len(distinctJobs(incs)) > 1
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			blocks = append(blocks, section(cur.String()))
			cur.Reset()
		}
	}
	for i, inc := range incs {
		if i == maxGroupLines {
			flush()
			blocks = append(blocks, section(fmt.Sprintf("…and %d more incidents (see the dashboard).", len(incs)-i)))
			break
		}
		line := groupLine(inc, ev, showJob)
		if cur.Len()+len(line)+1 > slackSectionMax-100 {
			flush()
		}
		if cur.Len() > 0 {
			cur.WriteByte('\n')
		}
		cur.WriteString(line)
	}
	flush()
	return blocks
}

func groupOverview(incs []incident.Incident) string {
	kinds := map[incident.Kind]int{}
	sevs := map[incident.Severity]int{}
	for _, inc := range incs {
		kinds[inc.Kind]++
		sevs[inc.Severity]++
	}
	var ss []string
	for _, sev := range []incident.Severity{incident.SeverityCritical, incident.SeverityWarning, incident.SeverityInfo} {
		if sevs[sev] > 0 {
			ss = append(ss, fmt.Sprintf("%s %d", sev, sevs[sev]))
		}
	}
	kindNames := make([]incident.Kind, 0, len(kinds))
	for k := range kinds {
		kindNames = append(kindNames, k)
	}
	sort.Slice(kindNames, func(i, j int) bool {
		if kinds[kindNames[i]] != kinds[kindNames[j]] {
			return kinds[kindNames[i]] > kinds[kindNames[j]]
		}
		return kindNames[i] < kindNames[j]
	})
	var ks []string
	for _, k := range kindNames {
		ks = append(ks, fmt.Sprintf("%s %d", escapeMrkdwn(kindTitle(k)), kinds[k]))
	}
	jobs := distinctJobs(incs)
	var js []string
	for i, j := range jobs {
		if i == 5 {
			js = append(js, fmt.Sprintf("and %d more", len(jobs)-i))
			break
		}
		js = append(js, escapeMrkdwn(truncate(j, 80)))
	}
	return "*By severity:* " + strings.Join(ss, " · ") + "\n*By kind:* " + strings.Join(ks, " · ") + "\n*Jobs:* " + strings.Join(js, ", ")
}

func distinctJobs(incs []incident.Incident) []string {
	seen := map[string]bool{}
	var jobs []string
	for _, inc := range incs {
		if !seen[inc.Job] {
			seen[inc.Job] = true
			jobs = append(jobs, inc.Job)
		}
	}
	sort.Strings(jobs)
	return jobs
}

func groupFallback(incs []incident.Incident, ev Event) string {
	jobs := distinctJobs(incs)
	var s string
	if ev == EventResolve {
		s = fmt.Sprintf("[RESOLVED] %d incidents", len(incs))
	} else {
		s = fmt.Sprintf("[%s] %d new incidents", severityLabel(worstSeverity(incs)), len(incs))
	}
	if len(jobs) == 1 {
		s += " in job " + escapeMrkdwn(jobs[0])
	} else {
		s += fmt.Sprintf(" in %d jobs", len(jobs))
	}
	return truncateEscaped(s, slackFallbackMax)
}

// threadBlocks is a reply in an incident's thread: updates of open incidents, or resolves
// of incidents whose original message lists several.
func threadBlocks(incs []incident.Incident, ev Event) []slack.Block {
	if len(incs) == 1 {
		inc := incs[0]
		var s string
		if ev == EventResolve {
			s = "*Resolved*"
			if inc.ResolvedAt != nil {
				s += " at " + fmtTime(*inc.ResolvedAt)
				if !inc.OpenedAt.IsZero() {
					s += " after " + fmtDuration(inc.ResolvedAt.Sub(inc.OpenedAt))
				}
			}
			s += ": " + escapeMrkdwn(incidentTitle(inc)) + " (" + escapeMrkdwn(inc.ID) + ")"
			return []slack.Block{section(s)}
		}
		s = "*Update* (revision " + strconv.Itoa(inc.Revision) + ")"
		if !inc.LastSeen.IsZero() {
			s += " at " + fmtTime(inc.LastSeen)
		}
		s += ": " + escapeMrkdwn(inc.Summary)
		if inc.Victims > 0 {
			s += "\nWaiting ranks: " + strconv.Itoa(inc.Victims)
		}
		blocks := []slack.Block{section(s)}
		if len(inc.Evidence) > 0 {
			blocks = append(blocks, section(evidenceText(inc.Evidence, maxUpdateEvidence)))
		}
		return blocks
	}
	incs = append([]incident.Incident(nil), incs...)
	sortIncidents(incs)
	title := fmt.Sprintf("*Updated* %d incidents:", len(incs))
	if ev == EventResolve {
		title = fmt.Sprintf("*Resolved* %d incidents:", len(incs))
	}
	return append([]slack.Block{section(title)}, listSections(incs, ev)...)
}

func threadFallback(incs []incident.Incident, ev Event) string {
	if len(incs) == 1 {
		if ev == EventResolve {
			return truncateEscaped("Resolved: "+escapeMrkdwn(incidentTitle(incs[0])), slackFallbackMax)
		}
		return truncateEscaped("Update: "+escapeMrkdwn(incs[0].Summary), slackFallbackMax)
	}
	if ev == EventResolve {
		return fmt.Sprintf("Resolved %d incidents", len(incs))
	}
	return fmt.Sprintf("Updated %d incidents", len(incs))
}

// RenderSlackText returns the text of the Slack message for an incident (open, or the
// resolved rewrite when it is resolved) as it is sent: mrkdwn with untrusted text escaped,
// one block per paragraph. Use it to show a rendered page outside Slack.
func RenderSlackText(inc incident.Incident, links Links) string {
	ev := EventOpen
	if inc.State == incident.StateResolved {
		ev = EventResolve
	}
	return BlocksText(incidentBlocks(inc, ev, links))
}

// BlocksText flattens Block Kit blocks to their text, one block per paragraph.
func BlocksText(blocks []slack.Block) string {
	var paras []string
	for _, b := range blocks {
		switch b := b.(type) {
		case *slack.HeaderBlock:
			paras = append(paras, b.Text.Text)
		case *slack.SectionBlock:
			var parts []string
			if b.Text != nil {
				parts = append(parts, b.Text.Text)
			}
			for _, f := range b.Fields {
				parts = append(parts, strings.ReplaceAll(f.Text, "\n", ": "))
			}
			paras = append(paras, strings.Join(parts, "\n"))
		case *slack.ContextBlock:
			var parts []string
			for _, e := range b.ContextElements.Elements {
				if t, ok := e.(*slack.TextBlockObject); ok {
					parts = append(parts, t.Text)
				}
			}
			paras = append(paras, strings.Join(parts, " "))
		case *slack.DividerBlock:
			paras = append(paras, "---")
		}
	}
	return strings.Join(paras, "\n\n")
}
