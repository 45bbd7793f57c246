// Command snapreplay replays the node snapshots a GPU fault-matrix run recorded
// (e2e/gpu/matrix.sh: samples.tgz, cases/<run>/snapshots-<feed>.jsonl) through the live
// detector's state, the engine and the incident lifecycle, on the recorded clock: a change to
// the engine is tried on real runs without the device. It prints, per run and feed, the
// incidents as they open or change kind, severity or culprits, with the seconds since the
// run's fault onset (matrix.json's truth), and the matrix's truth beside them.
//
//	go run ./internal/snapreplay -matrix OUT/matrix.json -cases DIR/cases [-run s41-13] [-feed plugin]
//
// The detector of the matrix evaluated every second with the default rules; so does this.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/detect/live"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

type sample struct {
	Snap *snapshot.Node `json:"snap"`
	T    float64        `json:"t"`
}

// truth is what matrix.json says of one run.
type truth struct {
	Name    string `json:"name"`
	Class   string `json:"class"`
	Onset   float64
	Roots   []int
	Healthy bool
}

func main() {
	matrix := flag.String("matrix", "", "matrix.json of the device command")
	cases := flag.String("cases", "", "the cases folder unpacked from samples.tgz")
	only := flag.String("run", "", "only runs whose name contains this")
	feed := flag.String("feed", "", "only this feed (info or plugin)")
	flag.Parse()
	truths, err := readTruth(*matrix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "snapreplay:", err)
		os.Exit(1)
	}
	dirs, _ := filepath.Glob(filepath.Join(*cases, "*"))
	sort.Strings(dirs)
	for _, dir := range dirs {
		name := filepath.Base(dir)
		if !strings.Contains(name, *only) {
			continue
		}
		for _, f := range []string{"info", "plugin"} {
			if *feed != "" && f != *feed {
				continue
			}
			path := filepath.Join(dir, "snapshots-"+f+".jsonl")
			if _, err := os.Stat(path); err != nil {
				continue
			}
			t := truths[name]
			fmt.Printf("== %s %s: truth roots %v onset %.2f\n", name, f, t.Roots, t.Onset)
			if err := replay(path, t); err != nil {
				fmt.Println("   error:", err)
			}
		}
	}
}

func readTruth(path string) (map[string]truth, error) {
	out := map[string]truth{}
	if path == "" {
		return out, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the matrix: %w", err)
	}
	var m struct {
		Runs []struct {
			Name  string         `json:"name"`
			Truth map[string]any `json:"truth"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("reading the matrix: %w", err)
	}
	for _, r := range m.Runs {
		t := truth{Name: r.Name}
		if v, ok := r.Truth["onset_t"].(float64); ok {
			t.Onset = v
		}
		if rs, ok := r.Truth["roots"].([]any); ok {
			for _, x := range rs {
				if f, ok := x.(float64); ok {
					t.Roots = append(t.Roots, int(f))
				}
			}
		}
		out[r.Name] = t
	}
	return out, nil
}

func replay(path string, t truth) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var samples []sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var s sample
		if json.Unmarshal(sc.Bytes(), &s) == nil && s.Snap != nil {
			samples = append(samples, s)
		}
	}
	if len(samples) == 0 {
		return fmt.Errorf("no snapshots")
	}
	state := live.NewState()
	life := detect.NewLifecycle(time.Minute)
	cfg := detect.DefaultConfig()
	at := func(x float64) time.Time { return time.UnixMicro(int64(x * 1e6)) }
	next := samples[0].T
	seen := map[string]string{}
	job := samples[0].Snap.Job
	for i := 0; i < len(samples); {
		for i < len(samples) && samples[i].T <= next {
			state.Put(samples[i].Snap, at(samples[i].T))
			i++
		}
		now := at(next)
		res, err := detect.EvaluateSafely(state.View(job, now), cfg, detect.TimingOK)
		if err != nil {
			fmt.Println("   rule failed:", err)
		}
		life.Update(job, res.Findings, now)
		for _, inc := range life.Incidents(job) {
			line := describe(inc)
			if seen[inc.ID] == line {
				continue
			}
			seen[inc.ID] = line
			rel := ""
			if t.Onset > 0 {
				rel = fmt.Sprintf("%+.1fs", next-t.Onset)
			}
			fmt.Printf("   %7s %s\n", rel, line)
		}
		next += 1
	}
	return nil
}

func describe(inc incident.Incident) string {
	var ranks []int
	for _, c := range inc.Culprits {
		ranks = append(ranks, c.Rank)
	}
	slices.Sort(ranks)
	s := fmt.Sprintf("%s %s/%s %v %s (%s)", inc.State, inc.Kind, inc.Severity, ranks, inc.Cause, inc.Key)
	if len(inc.Summary) > 150 {
		return s + ": " + inc.Summary[:150]
	}
	return s + ": " + inc.Summary
}
