package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/detect/live"
	"github.com/ncclwatch/watchdog/incident"
)

func runStatus(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	detector := fs.String("detector", "http://127.0.0.1:9300", "detector API base URL")
	job := fs.String("job", "", "job to show (default: every job)")
	once := fs.Bool("once", false, "print once and exit (default: refresh every --every)")
	every := fs.Duration("every", 2*time.Second, "refresh period")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := applyEnv(fs); err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		var b strings.Builder
		if err := renderStatus(ctx, client, *detector, *job, &b); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		if !*once {
			fmt.Print("\033[H\033[2J") // clear the terminal between refreshes
		}
		fmt.Print(b.String())
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

func getJSON(ctx context.Context, c *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// renderStatus writes communicators × ranks (progress, lag, GPU state) and incidents.
func renderStatus(ctx context.Context, c *http.Client, base, job string, w io.Writer) error {
	base = strings.TrimRight(base, "/")
	jobs := []string{job}
	if job == "" {
		if err := getJSON(ctx, c, base+"/api/v1/jobs", &jobs); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "ncclwatch status  %s  detector %s\n", time.Now().UTC().Format("15:04:05Z"), base)
	if len(jobs) == 0 {
		fmt.Fprintln(w, "\nno jobs reporting")
	}
	for _, j := range jobs {
		var v live.JobView
		if err := getJSON(ctx, c, base+"/api/v1/jobs/"+url.PathEscape(j), &v); err != nil {
			return err
		}
		writeJobView(w, &v)
	}
	var monitoring []incident.Incident
	if err := getJSON(ctx, c, base+"/api/v1/incidents?job=_ncclwatch&state=open", &monitoring); err == nil && len(monitoring) > 0 {
		fmt.Fprintln(w, "\nWATCHDOG ITSELF")
		for _, inc := range monitoring {
			fmt.Fprintf(w, "  [%s] %s\n", inc.Severity, inc.Summary)
		}
	}
	return nil
}

func writeJobView(w io.Writer, v *live.JobView) {
	ranks, lost := 0, 0
	for _, n := range v.Nodes {
		ranks += len(n.Ranks)
		if n.State == "lost" {
			lost++
		}
	}
	fmt.Fprintf(w, "\nJOB %s   %d nodes (%d lost), %d ranks\n", v.Job, len(v.Nodes), lost, ranks)
	paused := map[string]bool{}
	for _, p := range v.Paused {
		paused[p] = true
	}
	for _, c := range v.Communicators {
		state := ""
		if paused[c.ID] {
			state = "  (paused: all ranks level, GPUs idle)"
		}
		fmt.Fprintf(w, "  communicator %s  %d ranks%s\n", shorten(c.ID, 48), c.NRanks, state)
		members := append([]live.MemberView(nil), c.Members...)
		sort.Slice(members, func(a, b int) bool { return members[a].Rank < members[b].Rank })
		const perLine = 4
		for i, m := range members {
			flag := " "
			if m.Behind > 0 {
				flag = "!"
			}
			gpu := m.GPUState
			if gpu == "" {
				gpu = "-"
			}
			fmt.Fprintf(w, "   %s r%-4d %-10s %7d (-%d) %5.1fs %-9s", flag, m.Rank, shorten(m.Host, 10), m.Count, m.Behind, m.AgeS, gpu)
			if (i+1)%perLine == 0 || i == len(members)-1 {
				fmt.Fprintln(w)
			}
		}
	}
	open := 0
	for _, inc := range v.Incidents {
		if inc.State == incident.StateOpen {
			open++
		}
	}
	fmt.Fprintf(w, "  incidents: %d open, %d resolved\n", open, len(v.Incidents)-open)
	for _, inc := range v.Incidents {
		when := inc.OpenedAt.UTC().Format("15:04:05")
		if inc.State == incident.StateResolved && inc.ResolvedAt != nil {
			when += "-" + inc.ResolvedAt.UTC().Format("15:04:05")
		}
		fmt.Fprintf(w, "   %-8s %-9s %-16s %s  %s\n", inc.State, inc.Severity, inc.Kind, when, shorten(inc.Summary, 160))
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
