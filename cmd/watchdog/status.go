package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ncclwatch/watchdog/detect/live"
	"github.com/ncclwatch/watchdog/incident"
)

const statusIntro = `usage: watchdog status [flags]

A live terminal view of the detector's jobs: per communicator each rank's progress (its rank
in the communicator and its global rank, collectives issued, how far behind, time since its
last op, GPU state), then the job's incidents. With --nodes, the fleet instead: open node
incidents (a host, GPU, NIC or link that was the root across jobs) with the action to take,
then the nodes ranked by job time lost to their parts. Refreshes every --every until
interrupted; --once prints one view.`

const statusExits = `Exit status:
  0  the view was shown
  1  the detector cannot be reached or answered an error
  2  usage error
  3  the job is unknown to the detector (no sidecar publishes it)
`

// exitUnknownJob is status's exit when --job names no job the detector knows.
const exitUnknownJob = 3

// errUnknownJob marks a job the detector does not know.
var errUnknownJob = errors.New("unknown job")

func runStatus(ctx context.Context, args []string) error { return statusMain(ctx, args, os.Stdout) }

func statusMain(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("status", statusIntro)
	fs.exits = statusExits
	detector := fs.String("detector", "http://127.0.0.1:9300", "detector API: a URL or host:port")
	job := fs.String("job", "", "job to show (default: every job)")
	once := fs.Bool("once", false, "print once and exit (default: refresh every --every)")
	every := fs.Duration("every", 2*time.Second, "refresh period")
	width := fs.Int("width", 0, "columns to fit (0: the terminal's, else $COLUMNS, else 80)")
	nodes := fs.Bool("nodes", false, "show the fleet instead: node incidents and the nodes ranked by job time lost to their parts")
	top := fs.Int("top", 20, "with --nodes, how many nodes to list")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (the job goes in --job)", fs.Arg(0))
	}
	base, err := detectorURL(*detector)
	if err != nil {
		return usageError{err}
	}
	if err := errors.Join(positiveDuration("every", *every), notNegative("width", float64(*width)), positiveInt("top", *top)); err != nil {
		return err
	}
	cols := *width
	if cols == 0 {
		cols = terminalWidth()
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for first := true; ; first = false {
		var b strings.Builder
		var err error
		if *nodes {
			err = renderNodes(ctx, client, base, *top, cols, &b)
		} else {
			err = renderStatus(ctx, client, base, *job, cols, &b)
		}
		if err != nil && (first || *once) {
			// Nothing to show yet: say why and exit, rather than refresh an error forever.
			code := exitError
			if errors.Is(err, errUnknownJob) {
				code = exitUnknownJob
			}
			return exitCodeError{code: code, err: err}
		}
		if err != nil {
			fmt.Fprintf(&b, "\nerror: %v (retrying every %s)\n", err, *every)
		}
		if !*once {
			fmt.Fprint(stdout, "\033[H\033[2J") // clear the terminal between refreshes
		}
		fmt.Fprint(stdout, b.String())
		if *once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*every):
		}
	}
}

// detectorURL accepts a URL or host:port (as people type it) and returns the API base.
func detectorURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("--detector %q: want a URL (http://host:9300) or host:port", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// terminalWidth is the width of the terminal on stdout, else $COLUMNS, else 80.
func terminalWidth() int {
	if ws, err := unix.IoctlGetWinsize(int(os.Stdout.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
		return int(ws.Col)
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}

// apiError is an HTTP status the detector answered.
type apiError struct {
	url    string
	status int
	body   string
}

func (e *apiError) Error() string { return fmt.Sprintf("%s: %d %s", e.url, e.status, e.body) }

func getJSON(ctx context.Context, c *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("detector unreachable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &apiError{url: u, status: resp.StatusCode, body: strings.TrimSpace(string(b))}
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: not the detector's API? %w", u, err)
	}
	return nil
}

// renderStatus writes the header, every job's communicators x ranks and incidents, the
// watchdog's own incidents and the legend, fitted to cols columns.
func renderStatus(ctx context.Context, c *http.Client, base, job string, cols int, w io.Writer) error {
	jobs := []string{job}
	var known []string
	if err := getJSON(ctx, c, base+"/api/v1/jobs", &known); err != nil {
		return err
	}
	if job == "" {
		jobs = known
	}
	views := make([]live.JobView, 0, len(jobs))
	for _, j := range jobs {
		var v live.JobView
		err := getJSON(ctx, c, base+"/api/v1/jobs/"+url.PathEscape(j), &v)
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusNotFound {
			return fmt.Errorf("%w %q: no sidecar publishes it (jobs the detector knows: %s)", errUnknownJob, j, listOrNone(known))
		}
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	fmt.Fprintf(w, "ncclwatch status  %s  detector %s\n", time.Now().UTC().Format("15:04:05Z"), base)
	if len(views) == 0 {
		fmt.Fprintln(w, "\nno jobs reporting")
	}
	for i := range views {
		writeJobView(w, &views[i], cols)
	}
	var monitoring []incident.Incident
	if err := getJSON(ctx, c, base+"/api/v1/incidents?job=_ncclwatch&state=open", &monitoring); err == nil && len(monitoring) > 0 {
		fmt.Fprintln(w, "\nWATCHDOG ITSELF")
		for _, inc := range monitoring {
			writeWrapped(w, fmt.Sprintf("[%s] %s", inc.Severity, inc.Summary), "  ", cols)
		}
	}
	fmt.Fprintln(w)
	writeWrapped(w, statusLegend, "", cols)
	return nil
}

const statusLegend = "Legend: cN is the rank in the communicator, rN the global rank (RANK); count: " +
	"collectives issued; -N: how many the rank is behind the communicator's most advanced one " +
	"(! marks it); age: time since its last op; gpu: comp(uting), wait(ing: spinning in a " +
	"collective), idle. Incident summaries name processes by global rank (\"rank N (host pid P)\"); " +
	"the rank lists of a collective mismatch (\"on rank a,b\") are ranks in the communicator."

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	if len(s) > 10 {
		return strings.Join(s[:10], ", ") + fmt.Sprintf(" and %d more", len(s)-10)
	}
	return strings.Join(s, ", ")
}

// memberCell is the width of one rank's cell: "! c12  r1234  node-00012  1234567 -1234  10.5s wait".
const memberCell = 52

func writeJobView(w io.Writer, v *live.JobView, cols int) {
	ranks, lost := 0, 0
	for _, n := range v.Nodes {
		ranks += len(n.Ranks)
		if n.State == "lost" {
			lost++
		}
	}
	open := 0
	for _, inc := range v.Incidents {
		if inc.State == incident.StateOpen {
			open++
		}
	}
	fmt.Fprintf(w, "\nJOB %s  %d nodes (%d lost), %d ranks, %d open incident(s)\n", v.Job, len(v.Nodes), lost, ranks, open)
	paused := map[string]bool{}
	for _, p := range v.Paused {
		paused[p] = true
	}
	perLine := max(1, (cols-2)/memberCell)
	for _, c := range v.Communicators {
		state := ""
		if paused[c.ID] {
			state = "  (paused: all ranks level, GPUs idle)"
		}
		fmt.Fprintf(w, "  communicator %s  %d ranks%s\n", shorten(c.ID, max(16, cols-40)), c.NRanks, state)
		header := fmt.Sprintf("%-*s", memberCell, "  comm  rank   host          count behind    age gpu")
		fmt.Fprintf(w, "  %s\n", strings.TrimRight(strings.Repeat(header, min(perLine, len(c.Members))), " "))
		members := append([]live.MemberView(nil), c.Members...)
		sort.Slice(members, func(a, b int) bool { return members[a].Rank < members[b].Rank })
		var line strings.Builder
		for i, m := range members {
			flag := " "
			if m.Behind > 0 {
				flag = "!"
			}
			global := "r?"
			if m.GlobalRank >= 0 {
				global = "r" + strconv.Itoa(m.GlobalRank)
			}
			behind := "0"
			if m.Behind > 0 {
				behind = "-" + strconv.FormatInt(m.Behind, 10)
			}
			cell := fmt.Sprintf("%s c%-4d %-6s %-10s %8d %6s %5.1fs %-4s", flag, m.Rank, global, shorten(m.Host, 10), m.Count,
				behind, m.AgeS, gpuShort(string(m.GPUState)))
			line.WriteString(fmt.Sprintf("%-*s", memberCell, cell))
			if (i+1)%perLine == 0 || i == len(members)-1 {
				fmt.Fprintf(w, "  %s\n", strings.TrimRight(line.String(), " "))
				line.Reset()
			}
		}
	}
	fmt.Fprintf(w, "  incidents: %d open, %d resolved\n", open, len(v.Incidents)-open)
	for _, inc := range v.Incidents {
		when := inc.OpenedAt.UTC().Format("15:04:05")
		if inc.State == incident.StateResolved && inc.ResolvedAt != nil {
			when += "-" + inc.ResolvedAt.UTC().Format("15:04:05")
		}
		fmt.Fprintf(w, "   %-8s %-8s %-16s %s\n", inc.State, inc.Severity, inc.Kind, when)
		writeWrapped(w, inc.Summary, "      ", cols)
	}
}

// gpuShort abbreviates a GPU state for the narrow column.
func gpuShort(s string) string {
	switch s {
	case "":
		return "-"
	case "computing":
		return "comp"
	case "waiting":
		return "wait"
	}
	return shorten(s, 4)
}

// writeWrapped writes text in lines of at most cols columns, each after indent.
func writeWrapped(w io.Writer, text, indent string, cols int) {
	room := max(20, cols-len(indent))
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > room {
			fmt.Fprintf(w, "%s%s\n", indent, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		fmt.Fprintf(w, "%s%s\n", indent, line)
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
