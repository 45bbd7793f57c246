package ras

import (
	"bytes"
	"path/filepath"
	"testing"
)

// A made-up 2.27-style report: processes per node differ, so the job summary has its
// distribution table and names the outlier node; a NOCOMM group; missing processes listed.
const text227 = `NCCL version 2.27.5+cuda12.8 compiled with CUDA 12.8
CUDA runtime version 12080, driver version 12080

Job summary
===========

  Nodes  Processes         GPUs
          per node  per process
      3          4            1
      1          2            1

  Nodes  Processes         GPUs
(total)    (total)      (total)
      4         14           14

The outlier node:
  Node 10.20.0.7 running processes 7001,7002

Communicators... (0.02s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       2-4        14        14   RUNNING  INCOMPLETE
    1         2         1         1         2         1    NOCOMM  INCOMPLETE,MISMATCH
10000         1         1         1         1         1      INIT  OK

Errors
======

INCOMPLETE
  Missing communicator data from 2 job processes
  Process 7001 on node 10.20.0.7 managing GPU 0
  Process 7002 on node 10.20.0.7 managing GPUs 1,2
  [could not find information on 1 process]

#0-0 (00c0ffee00000001) INCOMPLETE
  Missing communicator data from 2 ranks
  Rank 12 -- GPU 0 managed by process 7001 on node 10.20.0.7
  Rank 13 -- [process information not found]

Warnings
========

#1-0 (00c0ffee00000002) MISMATCH
  Communicator ranks have different status
  Rank 1 has status NOCOMM -- GPU 2 managed by process 7002 on node 10.20.0.7
`

func TestInTextLayout(t *testing.T) {
	lines := bytes.SplitAfter([]byte(text227), []byte("\n"))
	if !TextStart(lines[0]) {
		t.Fatalf("TextStart(%q) = false", lines[0])
	}
	for _, l := range lines[1:] {
		if !InText(l) {
			t.Errorf("InText(%q) = false", l)
		}
	}
	caps, _ := filepath.Glob(filepath.Join(capturesDir, "*", "ras.*.text.txt"))
	if len(caps) == 0 {
		t.Fatal("no text captures")
	}
	for _, c := range caps {
		lines := bytes.SplitAfter(loadCapture(t, c), []byte("\n"))
		for _, l := range lines[1:] {
			if !InText(l) {
				t.Errorf("%s: InText(%q) = false", filepath.Base(c), l)
			}
		}
	}
	rep, err := ParseText([]byte(text227))
	if err != nil || len(rep.Comms) != 2 || rep.Unresp != 2 || len(rep.Comms[0].Unresp) != 2 {
		t.Errorf("2.27 layout: %v %+v", err, rep)
	}
}

// Lines a console holds next to a report end it.
func TestInTextForeign(t *testing.T) {
	for _, l := range []string{
		"[rank118]:[E603 17:48:01.005271823 ProcessGroupNCCL.cpp:632] [Rank 118] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE)",
		"E0603 17:48:01.005 ProcessGroupNCCL.cpp:632] error",
		" 3: node-4:1234:1300 [3] NCCL INFO comm 0x1 rank 3 nranks 8 - Init COMPLETE",
		"node-4:1234:1300 [3] NCCL INFO NCCL version 2.27.5+cuda12.8",
		"NCCL version 2.27.5 compiled with CUDA 12.8",
		"Traceback (most recent call last):",
		"  File \"train.py\", line 10, in <module>",
		"```",
		"epoch 3 loss 0.25",
		"   12   0.25   OK?",
	} {
		if InText([]byte(l + "\n")) {
			t.Errorf("InText(%q) = true", l)
		}
	}
	if TextStart([]byte("node-4:1234:1300 [3] NCCL INFO NCCL version 2.27.5+cuda12.8\n")) {
		t.Error("an NCCL INFO version line opens a report")
	}
}
