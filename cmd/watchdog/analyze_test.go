package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

const silentCapture = "../../testdata/captures/nccl-2.28.9-2xH200/silent"

func TestAnalyzeCommand(t *testing.T) {
	cases := []struct {
		name string
		args []string
		exit int
		out  string // in stdout
		err  string // in stderr
	}{
		{"flags after paths", []string{silentCapture, "--json"}, 1, `"verdict": "findings"`, ""},
		{"flags before paths", []string{"--json", silentCapture}, 1, `"exit_code": 1`, ""},
		{"verbose after path", []string{silentCapture, "--verbose", "--log-tz", "UTC"}, 1, "Coverage", ""},
		{"double dash", []string{"--", silentCapture}, 1, "stopped issuing collectives", ""},
		{"no paths", nil, 2, "", "no paths given"},
		{"bad flag", []string{silentCapture, "--bogus"}, 2, "", "flag provided but not defined"},
		{"missing path", []string{"/no/such/dir"}, 2, "", "no such file or directory"},
		{"cannot judge", []string{"../../testdata/captures/nccl-2.28.9-2xH200/default_subsys"}, 3, "this is not an all-clear", ""},
		{"clean", []string{"../../testdata/captures/nccl-2.28.9-2xH200/healthy"}, 0, "none: no mismatch", ""},
		{"help", []string{"-h"}, 0, "$NCCLWATCH_LOG_TZ", ""},
		{"runs: a host that was the root in two", []string{"--runs", silentCapture, "../../testdata/captures/nccl-2.28.9-2xH200/crash"}, 1,
			"Parts that were roots in more than one run (1)\n  1. host vm: 2 finding(s) in 2 runs", ""},
		{"runs as JSON", []string{"--runs", "--json", silentCapture, "../../testdata/captures/nccl-2.28.9-2xH200/healthy"}, 1, `"recurring": []`, ""},
		{"negative workers", []string{silentCapture, "--workers", "-1"}, 2, "", "--workers -1: must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := analyzeMain(context.Background(), c.args, strings.NewReader(""), &out, &errb)
			if code != c.exit || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", code, c.exit, out.String(), errb.String())
			}
		})
	}
}

func TestAnalyzeStdin(t *testing.T) {
	var out, errb bytes.Buffer
	code := analyzeMain(context.Background(), []string{"-", "--json"}, strings.NewReader("epoch 1 loss 0.5\n"), &out, &errb)
	var rep struct {
		Verdict string `json:"verdict"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 3 || rep.Verdict != "cannot_judge" {
		t.Fatalf("exit %d verdict %q err %v\n%s%s", code, rep.Verdict, err, out.String(), errb.String())
	}
}
