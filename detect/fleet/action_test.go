package fleet

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestApplyKubernetes: with both opt-ins, the taint is added by a JSON patch guarded by the
// node's resourceVersion and the condition by a strategic merge patch of its status, with
// the service account's token; without them nothing is sent.
func TestApplyKubernetes(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("Authorization")+" "+string(b))
		mu.Unlock()
		if r.Method == http.MethodGet {
			json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"resourceVersion": "42"}, "spec": map[string]any{}})
		}
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ni := &NodeIncident{Part: Part{Kind: PartGPU, Node: "n2", ID: "1b000"}}
	ni.Incident.ID, ni.Incident.Summary = "node-x", "GPU 1b000 of n2 was the root in 2 job(s)"
	ni.Actions = Suggest(ni, ActionConfig{})
	Apply(t.Context(), ni, ActionConfig{})
	if len(calls) != 0 {
		t.Fatalf("without opt-in: %v", calls)
	}
	Apply(t.Context(), ni, ActionConfig{Kubernetes: KubernetesConfig{Taint: true, Condition: true, APIServer: srv.URL, TokenFile: tok}})
	want := []string{
		"GET /api/v1/nodes/n2  Bearer s3cret ",
		`PATCH /api/v1/nodes/n2 application/json-patch+json Bearer s3cret [{"op":"test","path":"/metadata/resourceVersion","value":"42"},{"op":"add","path":"/spec/taints","value":[{"key":"ncclwatch.io/node-fault","value":"gpu","effect":"NoSchedule"}]}]`,
		`PATCH /api/v1/nodes/n2/status application/strategic-merge-patch+json Bearer s3cret {"status":{"conditions":[{`,
	}
	if len(calls) != len(want) {
		t.Fatalf("calls %q", calls)
	}
	for i, w := range want {
		if !strings.HasPrefix(calls[i], w) {
			t.Errorf("call %d: %q\nwant prefix %q", i, calls[i], w)
		}
	}
	for _, a := range ni.Actions {
		if a.System == "kubernetes" && (!a.Applied || a.Error != "") {
			t.Errorf("%s %s: applied %v, error %q", a.System, a.What, a.Applied, a.Error)
		}
	}
}

// TestApplySlurm runs the configured scontrol (a script here) without a shell.
func TestApplySlurm(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "args")
	script := filepath.Join(dir, "scontrol")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > "+out+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ni := &NodeIncident{Part: Part{Kind: PartHost, Node: "node-17"}, Jobs: make([]JobEvidence, 2)}
	ni.Incident.ID = "node-1"
	ni.Actions = Suggest(ni, ActionConfig{})
	Apply(t.Context(), ni, ActionConfig{Slurm: SlurmConfig{Drain: true, Scontrol: script}})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != "update\nnodename=node-17\nstate=drain\nreason=ncclwatch host: root in 2 jobs (node-1)\n" {
		t.Errorf("scontrol got %q", got)
	}
}
