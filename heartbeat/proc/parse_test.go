package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// statLine renders a /proc/<pid>/stat line with the given comm, state and start time
// (field 22), 12 ticks of user and 3 of system time, and plausible values elsewhere.
func statLine(pid int, comm string, state byte, start uint64) string {
	return statLineCPU(pid, comm, state, 12, 3, start)
}

// statLineCPU is statLine with the CPU times (fields 14 and 15) given.
func statLineCPU(pid int, comm string, state byte, utime, stime, start uint64) string {
	// Children's times (fields 16, 17) are set apart from the process's own, to catch a
	// parser that reads the wrong pair.
	return fmt.Sprintf("%d (%s) %s 1 %d %d 0 -1 4194560 1520 0 0 0 %d %d 700 800 20 0 1 0 %d 9027584 396 "+
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		pid, comm, []byte{state}, pid, pid, utime, stime, start)
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Stat
		err  bool
	}{
		{"plain", statLine(607, "python3", 'S', 123456), Stat{607, "python3", 'S', 12, 3, 123456}, false},
		{"comm with ) ( and spaces", statLine(42, "pt_main) (x y", 'R', 99), Stat{42, "pt_main) (x y", 'R', 12, 3, 99}, false},
		{"comm ending in )", statLine(42, "a b)", 'S', 7), Stat{42, "a b)", 'S', 12, 3, 7}, false},
		{"comm of digits and spaces", statLine(9, "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21", 'Z', 5), Stat{9, "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21", 'Z', 12, 3, 5}, false},
		{"empty comm", statLine(9, "", 'S', 5), Stat{9, "", 'S', 12, 3, 5}, false},
		{"in I/O, busy", statLineCPU(31, "python3", 'D', 987654321, 4242, 5), Stat{31, "python3", 'D', 987654321, 4242, 5}, false},
		{"traced", statLineCPU(31, "python3", 't', 0, 0, 5), Stat{31, "python3", 't', 0, 0, 5}, false},
		{"bad utime", strings.Replace(statLineCPU(1, "x", 'S', 424242, 3, 1), "424242", "-5", 1), Stat{}, true},
		{"bad stime", strings.Replace(statLineCPU(1, "x", 'S', 12, 434343, 1), "434343", "3.5", 1), Stat{}, true},
		{"empty", "", Stat{}, true},
		{"no parens", "607 python3 S 1 2 3", Stat{}, true},
		{"short", "607 (python3) S 1 2 3\n", Stat{}, true},
		{"bad pid", strings.Replace(statLine(607, "x", 'S', 1), "607", "6o7", 1), Stat{}, true},
		{"zero pid", statLine(0, "x", 'S', 1), Stat{}, true},
		{"bad starttime", strings.Replace(statLine(1, "x", 'S', 424242), "424242", "-1", 1), Stat{}, true},
		{"bad state", strings.Replace(statLine(1, "x", 'S', 1), ") S ", ") SS ", 1), Stat{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseStatSelf(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	st, err := ParseStat(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != os.Getpid() || st.StartTicks == 0 || st.Exited() {
		t.Errorf("self stat %+v, pid %d", st, os.Getpid())
	}
}

func TestParseEnviron(t *testing.T) {
	long := strings.Repeat("j", 1000)
	for _, tc := range []struct {
		name string
		in   string
		want Env
	}{
		{"none", "", UnknownEnv},
		{"torchrun",
			"PATH=/usr/bin\x00RANK=9\x00LOCAL_RANK=1\x00WORLD_SIZE=16\x00GROUP_RANK=4\x00" +
				"TORCHELASTIC_RUN_ID=job-7\x00MASTER_ADDR=10.0.0.1\x00SLURM_JOB_ID=5512\x00",
			Env{Rank: 9, LocalRank: 1, WorldSize: 16, GroupRank: 4, RunID: "job-7", SlurmJobID: "5512", MasterAddr: "10.0.0.1"}},
		{"first wins, no trailing NUL",
			"RANK=1\x00RANK=2\x00SLURM_JOB_ID=88",
			Env{Rank: 1, LocalRank: -1, WorldSize: -1, GroupRank: -1, SlurmJobID: "88"}},
		{"bad numbers, no '='",
			"RANK=-1\x00LOCAL_RANK=x\x00WORLD_SIZE=99999999999999999999\x00GROUP_RANK\x00=5\x00",
			UnknownEnv},
		{"value with '=' and a long one",
			"MASTER_ADDR=a=b\x00TORCHELASTIC_RUN_ID=" + long + "\x00",
			Env{Rank: -1, LocalRank: -1, WorldSize: -1, GroupRank: -1, MasterAddr: "a=b", RunID: long[:maxEnvValue]}},
		{"not utf-8", "SLURM_JOB_ID=\xff1\x00", Env{Rank: -1, LocalRank: -1, WorldSize: -1, GroupRank: -1, SlurmJobID: "?1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseEnviron([]byte(tc.in)); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if id := (Env{RunID: "a", SlurmJobID: "b"}).JobID(); id != "a" {
		t.Errorf("JobID = %q", id)
	}
	if id := (Env{SlurmJobID: "b"}).JobID(); id != "b" {
		t.Errorf("JobID = %q", id)
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine(607, "python3", 'S', 123456)))
	f.Add([]byte(statLine(42, "pt_main) (x y", 'R', 99)))
	f.Add([]byte("1 () S"))
	f.Add([]byte(statLineCPU(31, "python3", 'D', 18446744073709551615, 1, 5)))
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseStat(b)
		if err != nil {
			return
		}
		if st.PID <= 0 || len(st.Comm) > len(b) {
			t.Fatalf("bad stat %+v", st)
		}
		// What parses renders back to something that parses the same.
		again, err := ParseStat([]byte(statLineCPU(st.PID, st.Comm, st.State, st.UTime, st.STime, st.StartTicks)))
		if err != nil || again != st {
			t.Fatalf("round trip %+v -> %+v, %v", st, again, err)
		}
	})
}

func FuzzParseEnviron(f *testing.F) {
	f.Add([]byte("RANK=9\x00LOCAL_RANK=1\x00WORLD_SIZE=16\x00TORCHELASTIC_RUN_ID=job-7\x00"))
	f.Add([]byte("RANK=\x00=\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e := ParseEnviron(b)
		for _, n := range []int{e.Rank, e.LocalRank, e.WorldSize, e.GroupRank} {
			if n < -1 {
				t.Fatalf("number %d in %+v", n, e)
			}
		}
		for _, s := range []string{e.RunID, e.SlurmJobID, e.MasterAddr} {
			if len(s) > 3*maxEnvValue {
				t.Fatalf("value of %d bytes", len(s))
			}
		}
	})
}

func TestParseSchedstat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		bad  bool
	}{
		{in: "123456789 98765 42\n", want: 98765},
		{in: "5 0 1", want: 0},
		{in: "5", bad: true},
		{in: "", bad: true},
		{in: "1 -3 2", bad: true},
	} {
		got, err := ParseSchedstat([]byte(tc.in))
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseSchedstat(%q) = %d, %v; want %d, bad %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func FuzzParseSchedstat(f *testing.F) {
	f.Add([]byte("123456789 98765 42\n"))
	f.Add([]byte("1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := ParseSchedstat(b)
		switch {
		case err != nil && err.Error() == "":
			t.Fatal("an error without words")
		case err == nil && !bytes.Contains(b, []byte(strconv.FormatUint(w, 10))):
			t.Fatalf("ParseSchedstat(%q) = %d: not a number the input holds", b, w)
		}
	})
}
