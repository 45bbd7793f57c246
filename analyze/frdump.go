package analyze

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/logparse/frdump"
	"github.com/ncclwatch/watchdog/snapshot"
)

// A folder may hold PyTorch Flight Recorder dumps beside the logs: <prefix><rank> files
// (TORCH_FR_DUMP_TEMP_FILE) pickled by torch, or their JSON form. Each becomes the process
// of its rank (logparse/frdump), joined to that rank's process from the logs when there is
// exactly one.

// frFile is one dump as read.
type frFile struct {
	dump   *frdump.Dump
	prefix string // of the file's name: dumps of one run share it
	rank   int    // from the file's name, else from the dump itself; -1: unknown
	named  bool   // the rank came from the name
}

// readDump reads a whole dump file. A file that is not a dump after all is skipped with the
// reason; a dump read in part is a read error (the rest is not judged), and its problems
// become notes.
func readDump(in *input, path string, res *fileResult) {
	b, err := io.ReadAll(io.LimitReader(in.r, frdump.MaxDumpBytes+1))
	if err != nil {
		res.err = fmt.Errorf("read: %w", err)
		res.stat.ReadErr = res.err.Error()
		return
	}
	if len(b) > frdump.MaxDumpBytes {
		res.skip = fmt.Sprintf("a Flight Recorder dump larger than %s: not read", humanBytes(frdump.MaxDumpBytes))
		return
	}
	d, err := frdump.Read(b, frdump.Limits{})
	if err != nil {
		what := "a Python pickle"
		if in.kind == contentFRJSON {
			what = "a JSON file"
		}
		why := strings.TrimPrefix(err.Error(), frdump.ErrNotDump.Error()+": ")
		res.skip = fmt.Sprintf("%s that is not a PyTorch Flight Recorder dump (%s)", what, why)
		return
	}
	f := &frFile{dump: d, rank: -1}
	base := filepath.Base(path)
	if p, r, ok := frdump.RankOfName(base); ok {
		f.prefix, f.rank, f.named = p, r, true
	}
	if own := d.OwnRank(); !f.named && own >= 0 {
		f.rank = own
	}
	res.fr = f
	res.stat.Kind = "fr-" + string(d.Form)
	res.stat.FREntries = int64(len(d.Entries))
	if d.Partial {
		res.err = errors.New(d.Problems[0])
		res.stat.ReadErr = res.err.Error()
	}
}

// frProcs turns the dumps into processes, joins each to its rank's process from the logs
// when there is exactly one, and says in notes what the dumps could not tell.
//
// When every dump is of a rank whose NCCL log has per-op lines, the logs already show each
// rank's collectives and the dumps' groups would only repeat them as communicators of their
// own (a mismatch would be reported twice); unless besideLogs is set, they are then only
// counted and noted. A dump of a rank without such a log is always judged, with every
// dump of the folder so that its groups have all their ranks.
func frProcs(results []*fileResult, procs []*detect.Proc, besideLogs bool) ([]*detect.Proc, []string) {
	var files []*fileResult
	for _, r := range results {
		if r.fr != nil && r.skip == "" {
			files = append(files, r)
		}
	}
	if len(files) == 0 {
		return procs, nil
	}
	var notes []string
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	for _, r := range files {
		f, path := r.fr, r.stat.Path
		for _, pr := range f.dump.Problems {
			if r.err != nil && pr == r.err.Error() {
				note("Flight Recorder dump %s could not be read to its end (%s): what came before was read", path, pr)
				continue
			}
			note("Flight Recorder dump %s: %s", path, pr)
		}
		if own := f.dump.OwnRank(); f.named && own >= 0 && own != f.rank {
			note("Flight Recorder dump %s is named for rank %d but its process groups and sends show rank %d: it was read as rank %d", path, f.rank, own, own)
			f.rank = own
		}
		if f.rank < 0 {
			note("Flight Recorder dump %s names no rank (torch writes <prefix><rank>) and its groups do not tell which rank wrote it: its entries are kept on a process of unknown rank", path)
		}
	}
	notes = append(notes, frDisagreements(files)...)
	byRank := map[int][]*detect.Proc{}
	for _, p := range procs {
		if p.Rank >= 0 {
			byRank[p.Rank] = append(byRank[p.Rank], p)
		}
	}
	if !besideLogs {
		covered := 0
		for _, r := range files {
			if logs := byRank[r.fr.rank]; r.fr.rank >= 0 && len(logs) == 1 && hasOps(logs[0]) {
				covered++
			}
		}
		if covered == len(files) {
			note("the %d Flight Recorder dump(s) are of ranks whose NCCL logs show every collective: the logs were judged, the dumps were read and not compared again", len(files))
			return procs, notes
		}
	}
	taken := map[*detect.Proc]bool{}
	for _, r := range files {
		f := r.fr
		sp := f.dump.Process(f.rank, r.stat.Path)
		if logs := byRank[f.rank]; f.rank >= 0 && len(logs) == 1 && !taken[logs[0]] && joinable(logs[0]) {
			// The same rank's NCCL log: its groups join the process (PyTorch's works are
			// not NCCL's calls, so they stay communicators of their own).
			p := logs[0]
			taken[p] = true
			p.Comms = append(p.Comms, sp.Comms...)
			p.File += "," + r.stat.Path
			if p.WorldSize == 0 {
				p.WorldSize = sp.WorldSize
			}
			if p.NCCL == "" {
				p.NCCL = sp.NCCL
			}
			continue
		}
		sp.Host = "?"
		p := &detect.Proc{Process: sp, Node: "?"}
		procs = append(procs, p)
	}
	return procs, notes
}

// hasOps reports a process whose NCCL log has per-op lines.
func hasOps(p *detect.Proc) bool {
	for _, c := range p.Comms {
		if c.Count > 0 && !strings.HasPrefix(c.ID, snapshot.FRCommPrefix) {
			return true
		}
	}
	return false
}

// joinable says whether a process read from logs may take a dump's groups: not one that is
// itself a dump's.
func joinable(p *detect.Proc) bool { return p.Source != snapshot.SourceFR }

// frDisagreements compares the dumps of one folder: the ranks of each process group and the
// dump format, and the ranks the groups hold against the dumps found. A dump whose groups
// disagree with the others' is from another job or run; its groups do not join theirs.
func frDisagreements(files []*fileResult) []string {
	var notes []string
	byDir := map[string][]*fileResult{}
	var dirs []string
	for _, r := range files {
		dir := filepath.Dir(r.stat.Path) + "\x00" + r.fr.prefix
		if _, ok := byDir[dir]; !ok {
			dirs = append(dirs, dir)
		}
		byDir[dir] = append(byDir[dir], r)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		set := byDir[dir]
		// The ranks of each group name, by how many dumps say so.
		type view struct {
			ranks string
			files []string
		}
		groups := map[string][]view{}
		versions := map[string][]string{}
		for _, r := range set {
			versions[r.fr.dump.Version] = append(versions[r.fr.dump.Version], r.stat.Path)
			for _, g := range r.fr.dump.Groups {
				key := rankText(g.Ranks)
				vs := groups[g.Name]
				found := false
				for i := range vs {
					if vs[i].ranks == key {
						vs[i].files = append(vs[i].files, r.stat.Path)
						found = true
					}
				}
				if !found {
					vs = append(vs, view{ranks: key, files: []string{r.stat.Path}})
				}
				groups[g.Name] = vs
			}
		}
		if len(versions) > 1 {
			var parts []string
			for v, fs := range versions {
				parts = append(parts, fmt.Sprintf("%q in %d", v, len(fs)))
			}
			sort.Strings(parts)
			notes = append(notes, fmt.Sprintf("the Flight Recorder dumps disagree on their format version (%s): they were written by different torch builds, perhaps by different runs", strings.Join(parts, ", ")))
		}
		var names []string
		for n := range groups {
			names = append(names, n)
		}
		sort.Strings(names)
		odd := map[string]bool{}
		for _, n := range names {
			vs := groups[n]
			if len(vs) < 2 {
				continue
			}
			sort.SliceStable(vs, func(a, b int) bool { return len(vs[a].files) > len(vs[b].files) })
			for _, v := range vs[1:] {
				for _, f := range v.files {
					if odd[f] {
						continue
					}
					odd[f] = true
					notes = append(notes, fmt.Sprintf("Flight Recorder dump %s disagrees with the other dumps on process group %s (ranks %s there, %s in %d other dump(s)): it is from another job or run, and is judged apart", f, n, v.ranks, vs[0].ranks, len(vs[0].files)))
				}
			}
		}
		// Ranks the groups hold that no dump of the set is from.
		have := map[int]bool{}
		for _, r := range set {
			if !odd[r.stat.Path] && r.fr.rank >= 0 {
				have[r.fr.rank] = true
			}
		}
		want := map[int]bool{}
		for _, r := range set {
			if odd[r.stat.Path] {
				continue
			}
			for _, g := range r.fr.dump.Groups {
				for _, rk := range g.Ranks {
					want[rk] = true
				}
			}
		}
		var missing []int
		for rk := range want {
			if !have[rk] {
				missing = append(missing, rk)
			}
		}
		sort.Ints(missing)
		if len(missing) > 0 && len(have) > 0 {
			notes = append(notes, fmt.Sprintf("no Flight Recorder dump of rank(s) %s, which the dumps' process groups hold (%d dump(s) read): a rank that died or was killed writes none, and one that never timed out writes one only when another asks", rankText(missing), len(have)))
		}
	}
	return notes
}

// unseenRanks are the ranks the Flight Recorder groups hold that no process shows: a rank
// that died writes no dump, and without its log nothing says what it did.
func unseenRanks(procs []*detect.Proc) []int {
	seen := map[int]bool{}
	for _, p := range procs {
		if p.Rank >= 0 {
			seen[p.Rank] = true
		}
	}
	want := map[int]bool{}
	for _, p := range procs {
		for _, c := range p.Comms {
			if c.FR == nil {
				continue
			}
			for _, r := range c.FR.Ranks {
				if !seen[r] {
					want[r] = true
				}
			}
		}
	}
	out := make([]int, 0, len(want))
	for r := range want {
		out = append(out, r)
	}
	sort.Ints(out)
	return out[:min(len(out), snapshot.MaxFRRanks)]
}

// rankText writes ranks compactly: "0-3,8".
func rankText(ranks []int) string {
	if ranks == nil {
		return "unknown"
	}
	var b strings.Builder
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if b.Len() > 200 {
			b.WriteString("…")
			break
		}
		b.WriteString(strconv.Itoa(ranks[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ranks[j]))
		}
		i = j + 1
	}
	return b.String()
}
