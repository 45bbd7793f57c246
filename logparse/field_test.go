package logparse

import "testing"

// TestFieldFormats covers what real clusters print around and inside NCCL's lines: launcher
// and collector prefixes, pre-2.18 Init lines, NCCL's own mismatch checks. The lines are
// written from the formats (Open MPI, Slurm, pdsh, kubectl, torchrun, NCCL 2.4-2.17, RCCL),
// not copied from any log.
func TestFieldFormats(t *testing.T) {
	const info = "gpu7:4242:4242 [2] NCCL INFO Using network IB"
	const want = `kind=using_network host=gpu7 pid=4242 tid=4242 dev=2`
	cases := []struct {
		name, line, want string
	}{
		// Launchers and collectors.
		{"open mpi --tag-output", "[1,6]<stdout>:" + info, want + ` lrank=6 text="IB"`},
		{"open mpi stderr", "[1,12]<stderr>:" + info, want + ` lrank=12 text="IB"`},
		{"open mpi --timestamp-output", "Fri Aug 11 12:31:45 2023[1,6]<stdout>:" + info,
			want + ` lrank=6 time=2023-08-11T12:31:45.000000000/0 text="IB"`},
		{"ctime with padded day", "Mon Jan  2 03:04:05 2023 " + info, want + ` time=2023-01-02T03:04:05.000000000/0 text="IB"`},
		{"srun --label padded", " 6: " + info, want + ` lrank=6 text="IB"`},
		{"srun --label zero padded", "06: " + info, want + ` lrank=6 text="IB"`},
		{"pdsh host label", "node-07.cluster: " + info, want + ` text="IB"`},
		{"pdsh then srun", "node07: 3: " + info, want + ` lrank=3 text="IB"`},
		{"kubectl --timestamps", "2023-08-11T12:31:45.123456789Z " + info, want + ` time=2023-08-11T12:31:45.123456789/9 text="IB"`},
		{"rfc3339 with offset", "2023-08-11T12:31:45+02:00 " + info, want + ` time=2023-08-11T12:31:45.000000000/0 text="IB"`},
		{"kubectl then torchrun", "2023-08-11T12:31:45.5Z [default1]:" + info, want + ` lrank=1 time=2023-08-11T12:31:45.500000000/1 text="IB"`},
		{"rank tag", "[3] " + info, want + ` lrank=3 text="IB"`},
		{"open mpi 4 --timestamp-output --tag-output", "2021-03-04T05:06:07.890Z: [1,12]<stdout>:" + info,
			want + ` lrank=12 time=2021-03-04T05:06:07.890000000/3 text="IB"`},
		{"open mpi 4 timestamp on a WARN", "2021-03-04T05:06:07.890Z: [1,12]<stderr>:gpu7:4242:4250 [2] misc/ibvwrap.cc:220 NCCL WARN Call to ibv_get_async_event failed",
			"kind=ib_setup host=gpu7 pid=4242 tid=4250 dev=2 lrank=12 time=2021-03-04T05:06:07.890000000/3 file=misc/ibvwrap.cc:220 verb=\"ibv_get_async_event\" dev= port=0 reason=\"\" fatal=false"},
		{"collector date and time apart, with zone", "2024-02-03 04:05:06.007 +08:00 " + info, want + ` time=2024-02-03T04:05:06.007000000/3 text="IB"`},
		{"collector time without zone", "2024-02-03 04:05:06 " + info, want + ` time=2024-02-03T04:05:06.000000000/0 text="IB"`},
		{"NCCL's time behind a collector's", "2024-02-03 12:05:06.007 +08:00 [2024-02-03 04:05:05] " + info, want + ` time=2024-02-03T04:05:05.000000000/0 text="IB"`},
		{"NCCL's time behind an opaque one", "Feb  3 12:05:06 [2024-02-03 04:05:05.25] " + info, want + ` time=2024-02-03T04:05:05.250000000/2 text="IB"`},
		{"kubectl --prefix", "[pod/trainer-0/main] " + info, want + ` text="IB"`},
		{"every launcher at once", "2023-08-11T12:31:45Z [pod/trainer-0/main] node07: [1,3]<stdout>:[rank3]:" + info, want + ` lrank=3 time=2023-08-11T12:31:45.000000000/0 text="IB"`},
		{"srun then pdsh then torchrun", "node07: 3: [default3]:" + info, want + ` lrank=3 text="IB"`},
		{"a date glued to a word is opaque", "2023-08-11T12:31:45Zsomething " + info, want + ` text="IB"`},
		{"empty hostname", ":5202:5683 [0] NCCL INFO Using network Socket", `kind=using_network host= pid=5202 tid=5683 dev=0 text="Socket"`},
		{"empty hostname after tag", "[1,0]<stdout>::5202:5683 [0] NCCL INFO Using network Socket", `kind=using_network host= pid=5202 tid=5683 dev=0 lrank=0 text="Socket"`},
		{"no pid:tid, dev only", "[0] NCCL INFO Using network IB", `kind=using_network text="IB"`},
		{"no prefix at all", "NCCL INFO Using network IB", `kind=using_network text="IB"`},
		{"host:pid without tid", "gpu7:4242 [1] NCCL INFO Using network IB", `kind=using_network host=gpu7 pid=4242 tid=0 dev=1 text="IB"`},
		// What posting a log adds: markdown around it, NCCL's prefix cut down to where it warned.
		{"terminal colours", "\x1b[31m" + info + "\x1b[0m", want + ` text="IB"`},
		{"fence glued to the first line", "```" + info, want + ` text="IB"`},
		{"inline code quote", "`" + info + "`", want + ` text="IB"`},
		{"blockquote", "> " + info, want + ` text="IB"`},
		{"source location without host:pid", "init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around rank 39.",
			"kind=coll_mismatch file=init.cc:1247 rank=39 fatal=true"},
		{"quoted source location", "`init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around rank 39.`",
			"kind=coll_mismatch file=init.cc:1247 rank=39 fatal=true"},
		{"quoted inside a sentence", "Key error message `gpu7:4242:4243 [2] include/socket.h:423 NCCL WARN Net : Connection closed by remote peer 10.1.0.8<20368>` which",
			`kind=conn_closed_remote host=gpu7 pid=4242 tid=4243 dev=2 file=include/socket.h:423 text="10.1.0.8<20368>"`},
		{"dev and source location", "[0] transport/net_ib.cc:818 NCCL WARN NET/IB : Got completion with error 4, opcode 0, len 32694, vendor err 81",
			"kind=ib_completion file=transport/net_ib.cc:818 peer= status=4 hca="},
		{"a sentence mentioning NCCL is not an NCCL line", "we wrote this long sentence to explain why the run failed with NCCL WARN in it", "kind=unknown"},
		{"warning label is not a host", "WARNING:torch.distributed.run:", "kind=unknown"},
		{"python error label stripped", "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.10.3", `kind=torch_nccl_error result=2 version="2.10.3"`},

		// Init lines before commId (2.4-2.17) and RCCL.
		{"init 2.10 no commId", "ai:7:9 [2] NCCL INFO comm 0x7fc0c8002f70 rank 2 nranks 4 cudaDev 2 busId 89000 - Init COMPLETE",
			"kind=init host=ai pid=7 tid=9 dev=2 api= jobrank=-1 comm=7fc0c8002f70 rank=2 nranks=4 cuda=2 nvml=-1 bus=89000 phase=2"},
		{"init 2.4 no busId", "ai:7:9 [1] NCCL INFO comm 0x2d8a9c0 rank 1 nranks 16 cudaDev 1 nvmlDev 1 - Init COMPLETE",
			"kind=init host=ai pid=7 tid=9 dev=1 api= jobrank=-1 comm=2d8a9c0 rank=1 nranks=16 cuda=1 nvml=1 bus=0 phase=2"},
		{"init 2.13 with commId", "ai:7:9 [1] NCCL INFO comm 0x2d8a9c0 rank 1 nranks 16 cudaDev 1 busId 1b000 commId 0xab12 - Init START",
			"kind=init host=ai pid=7 tid=9 dev=1 api= jobrank=-1 comm=2d8a9c0 rank=1 nranks=16 cuda=1 nvml=-1 bus=1b000 commid=ab12 phase=1"},
		{"init rccl extra fields", "mi:7:9 [0] NCCL INFO comm 0x55d1 rank 0 nranks 8 cudaDev 0 busId 4000 localSize 8 used 123456 bytes - Init COMPLETE",
			"kind=init host=mi pid=7 tid=9 dev=0 api= jobrank=-1 comm=55d1 rank=0 nranks=8 cuda=0 nvml=-1 bus=4000 phase=2"},
		{"init without rank is not init", "ai:7:9 [1] NCCL INFO comm 0x2d8a9c0 nranks 16 cudaDev 1 - Init COMPLETE", "kind=info host=ai pid=7 tid=9 dev=1"},
		{"bare version 2.10 stdout", "NCCL version 2.10.3+cuda11.3", `kind=version text="2.10.3+cuda11.3"`},
		{"version under a launcher tag", "[1,0]<stdout>:NCCL version 2.7.8+cuda11.0", `kind=version lrank=0 text="2.7.8+cuda11.0"`},
		{"rccl version", "NCCL version 2.18.3+hip6.1 develop:7e1cbb4", `kind=version text="2.18.3+hip6.1"`},
		{"rccl's own version line", "RCCL version 2.18.3+hip6.1 develop:7e1cbb4", `kind=version text="2.18.3+hip6.1"`},
		{"rccl version at INFO", "mi:7:9 [0] NCCL INFO RCCL version 2.20.5+hip6.2", `kind=version host=mi pid=7 tid=9 dev=0 text="2.20.5+hip6.2"`},
		{"rccl 2.27 aligned banner", "mi:7:9 [0] NCCL INFO RCCL version : 2.27.7-HEAD:0a1b2c3", `kind=version host=mi pid=7 tid=9 dev=0 text="2.27.7-HEAD:0a1b2c3"`},
		{"rccl aligned banner unprefixed", "RCCL version : 2.27.7-HEAD:0a1b2c3", `kind=version text="2.27.7-HEAD:0a1b2c3"`},
		{"nccl version with cuda", "NCCL version 2.21.5+cuda12.4", `kind=version text="2.21.5+cuda12.4"`},

		// NCCL 2.1-2.3: no "NCCL" before the level.
		{"2.2 info", "gpu7:4242:4242 [2] INFO Using internal Network Socket", "kind=info host=gpu7 pid=4242 tid=4242 dev=2"},
		{"2.2 interface line", "gpu7:4242:4242 [2] INFO NET : Using interface eth1:10.3.0.7<0>", `kind=bootstrap host=gpu7 pid=4242 tid=4242 dev=2 text="eth1:10.3.0.7<0>"`},
		{"2.2 warn with source", "gpu7:4242:4250 [2] include/socket.h:360 WARN Call to connect failed : Connection timed out",
			`kind=socket_connect host=gpu7 pid=4242 tid=4250 dev=2 file=include/socket.h:360 peer="" reason="Connection timed out" fatal=true`},
		{"2.1 transport line", "gpu7:4242:4250 [2] INFO 1 -> 0 via P2P/IPC", `kind=channel host=gpu7 pid=4242 tid=4250 dev=2 ch=0 1->0 via="P2P/IPC"`},
		{"2.2 breadcrumb", "gpu7:4242:4250 [2] INFO bootstrap.cu:28 -> 2 [Net]", "kind=breadcrumb host=gpu7 pid=4242 tid=4250 dev=2 file=bootstrap.cu:28 code=2"},
		{"bare INFO without host:pid:tid is not NCCL's", "[2] INFO Using internal Network Socket", "kind=unknown lrank=2"},
		{"bare INFO after a number triple is not NCCL's", "12:34:56 [2] INFO starting epoch", "kind=unknown"},
		{"another program's INFO", "2023 INFO trainer: step 10", "kind=unknown"},

		// NCCL's own diagnostics.
		{"2.4 mismatch check", "ai:7:9 [3] enqueue.cc:200 NCCL WARN Mismatched collective detected, please check your collective calls at and around rank 3. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs",
			"kind=coll_mismatch host=ai pid=7 tid=9 dev=3 file=enqueue.cc:200 rank=3 fatal=true"},
		{"2.4 suspected mismatch", "ai:7:9 [3] init.cc:900 NCCL WARN Your program may be hanging, this may be caused by a collective mismatch around rank 5. Please check your collective calls at and around this rank. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs",
			"kind=coll_mismatch host=ai pid=7 tid=9 dev=3 file=init.cc:900 rank=5 fatal=false"},
		{"net/ib size mismatch", "ai:7:11 [3] transport/net_ib.cc:700 NCCL WARN NET/IB : req 1/1 tag 7 peer 10.0.0.2<43210> collective mismatch error, local size 4096 remote size 2048",
			`kind=net_size_mismatch host=ai pid=7 tid=11 dev=3 file=transport/net_ib.cc:700 peer="10.0.0.2<43210>"`},
		{"net/ib incorrect receive info", "ai:7:11 [3] transport/net_ib.cc:700 NCCL WARN NET/IB : req 1/1 tag 7 peer 10.0.0.2<43210> posted incorrect receive info: size 4096 addr 0x1 rkeys[0]=0x2",
			`kind=net_size_mismatch host=ai pid=7 tid=11 dev=3 file=transport/net_ib.cc:700 peer="10.0.0.2<43210>"`},
	}
	var l Line
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			Parse([]byte(c.line), &l)
			g := got(&l)
			switch l.Kind {
			case KindCollMismatch:
				g += " rank=" + itoa(l.Code) + " fatal=" + map[bool]string{true: "true", false: "false"}[l.Fatal]
			case KindNetSizeMismatch:
				g += " peer=\"" + string(l.Text) + "\""
			}
			if g != c.want {
				t.Errorf("\n line %q\n got  %s\n want %s", c.line, g, c.want)
			}
		})
	}
}

func itoa(v int) string {
	if v < 0 {
		return "-" + itoa(-v)
	}
	if v < 10 {
		return string(rune('0' + v))
	}
	return itoa(v/10) + string(rune('0'+v%10))
}

// FuzzLauncherPrefix feeds arbitrary text, alone and before a real NCCL line, through the
// launcher-prefix reader and the parser: what is stripped is always a prefix of the input,
// and a line that parses the same without the prefix must still parse as NCCL.
func FuzzLauncherPrefix(f *testing.F) {
	for _, p := range []string{"[1,6]<stdout>:", "Fri Aug 11 12:31:45 2023[1,6]<stdout>:", " 6: ", "node07: ",
		"2023-08-11T12:31:45.123456789Z ", "2023-08-11T12:31:45+02:00 ", "[default3]:", "[rank3]:", "[3] ", "", ":",
		"[1,", "Mon Jan  2 03:04:05 2023", "0: [rank0]: ", "```", "`", "> ", ">> [0] ", "[0] misc/socket.cc:71 ",
		"init.cc:1247 ", "(pid=3817959) ", "[0m ", "\x1b[0m ", "\x1b[1;31m", "\x1b[",
		"2021-03-04T05:06:07.890Z: [1,12]<stdout>:", "2024-02-03 12:05:06.007 +08:00 ", "2024-02-03 12:05:06 -0530 ", "[pod/trainer-0/main] "} {
		f.Add([]byte(p))
	}
	const line = "gpu7:4242:4243 [2] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0xabc [nranks=4] stream (nil)"
	f.Fuzz(func(t *testing.T, prefix []byte) {
		var l Line
		l.reset()
		rest := stripLauncher(prefix, &l)
		if len(rest) > len(prefix) || string(prefix[len(prefix)-len(rest):]) != string(rest) {
			t.Fatalf("stripLauncher(%q) = %q: not a suffix", prefix, rest)
		}
		if l.HasTime && (l.Time.Month < 1 || l.Time.Month > 12 || l.Time.Nanos < 0 || l.Time.Nanos >= 1e9) {
			t.Fatalf("stripLauncher(%q) time %+v", prefix, l.Time)
		}
		full := append(append([]byte(nil), prefix...), line...)
		Parse(full, &l)
		if l.Kind >= NumKinds {
			t.Fatalf("kind %d", l.Kind)
		}
		if l.Kind == KindColl && (l.Coll.Comm != 0xabc || l.Coll.NRanks != 4) {
			t.Fatalf("%q: coll %+v", full, l.Coll)
		}
	})
}
