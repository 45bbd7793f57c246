package fleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// ActionConfig says what a node incident suggests and, where an operator opted in, does.
// By default nothing is done: the incident carries the commands to run.
type ActionConfig struct {
	Slurm      SlurmConfig      `yaml:"slurm"`
	Kubernetes KubernetesConfig `yaml:"kubernetes"`
}

// SlurmConfig: Drain runs `scontrol update nodename=N state=drain reason=...` when a node
// incident opens (the detector's user must be a Slurm operator).
type SlurmConfig struct {
	Drain    bool   `yaml:"drain"`
	Scontrol string `yaml:"scontrol"` // path (default "scontrol" on PATH)
}

// KubernetesConfig: Condition sets the node condition NcclwatchNodeFault, Taint adds the
// taint ncclwatch.io/node-fault=<part kind>:NoSchedule, through the API server with the
// pod's service account (RBAC: get and patch on nodes, patch on nodes/status; nothing
// else). Both are opt-in.
type KubernetesConfig struct {
	Condition bool `yaml:"condition"`
	Taint     bool `yaml:"taint"`
	// APIServer, TokenFile and CAFile default to the in-cluster service account's.
	APIServer string `yaml:"api_server"`
	TokenFile string `yaml:"token_file"`
	CAFile    string `yaml:"ca_file"`
}

// Names on the Kubernetes node.
const (
	ConditionType = "NcclwatchNodeFault"
	TaintKey      = "ncclwatch.io/node-fault"
)

// Action is one thing to do about a node incident: the command that does it and the one
// that undoes it when the node returns.
type Action struct {
	System  string   `json:"system"` // slurm, kubernetes
	What    string   `json:"what"`   // drain, condition, taint
	Command []string `json:"command"`
	Undo    []string `json:"undo,omitempty"`
	// Applied says the detector did it (opt-in); Error why it could not.
	Applied bool   `json:"applied,omitempty"`
	Error   string `json:"error,omitempty"`
}

// nodeName is what a node name must look like before it goes into a command: names come
// from the jobs' logs and are not trusted.
var nodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

// reason is the drain reason: the part and the incident, from safe characters only.
func reason(ni *NodeIncident) string {
	r := fmt.Sprintf("ncclwatch %s: root in %d jobs (%s)", ni.Part.Kind, len(ni.Jobs), ni.Incident.ID)
	return strings.Map(func(c rune) rune {
		if c == ' ' || c == ':' || c == '(' || c == ')' || c == '-' || c == '_' || c == '.' ||
			(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			return c
		}
		return '_'
	}, r)
}

// Suggest returns the actions for a node incident: the Slurm drain, the Kubernetes taint
// and condition, each with its undo; none when the node's name is not a safe host name.
func Suggest(ni *NodeIncident, cfg ActionConfig) []Action {
	n := ni.Part.Node
	if !nodeName.MatchString(n) {
		return []Action{{System: "any", What: "drain", Error: fmt.Sprintf("node name %q is not a host name: drain it by hand", n)}}
	}
	taint := TaintKey + "=" + string(ni.Part.Kind) + ":NoSchedule"
	return []Action{
		{System: "slurm", What: "drain", Command: []string{"scontrol", "update", "nodename=" + n, "state=drain", "reason=" + reason(ni)},
			Undo: []string{"scontrol", "update", "nodename=" + n, "state=resume"}},
		{System: "kubernetes", What: "taint", Command: []string{"kubectl", "taint", "nodes", n, taint},
			Undo: []string{"kubectl", "taint", "nodes", n, TaintKey + "-"}},
		{System: "kubernetes", What: "condition", Command: []string{"kubectl", "get", "node", n, "-o",
			"jsonpath={.status.conditions[?(@.type==\"" + ConditionType + "\")]}"}},
	}
}

func actionLines(as []Action) []string {
	var out []string
	for _, a := range as {
		if len(a.Command) == 0 {
			out = append(out, a.System+" "+a.What+": "+a.Error)
			continue
		}
		line := fmt.Sprintf("%s %s: %s", a.System, a.What, shellQuote(a.Command))
		if a.Applied {
			line += " (done by the detector)"
		} else if a.Error != "" {
			line += " (failed: " + a.Error + ")"
		}
		out = append(out, line)
	}
	return out
}

// shellQuote renders argv for a person to paste; the node name was checked, the reason
// is made of safe characters, so only spaces and brackets need quoting.
func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsAny(a, " ()[]{}?\"*'$;&|<>`\\") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}

// Apply does the actions the configuration opted into, and marks each as applied or
// failed. It runs commands without a shell.
func Apply(ctx context.Context, ni *NodeIncident, cfg ActionConfig) {
	for i := range ni.Actions {
		a := &ni.Actions[i]
		if len(a.Command) == 0 {
			continue
		}
		var err error
		switch {
		case a.System == "slurm" && a.What == "drain" && cfg.Slurm.Drain:
			err = runScontrol(ctx, cfg.Slurm, a.Command[1:])
		case a.System == "kubernetes" && a.What == "taint" && cfg.Kubernetes.Taint:
			err = newKube(cfg.Kubernetes).taint(ctx, ni.Part.Node, string(ni.Part.Kind))
		case a.System == "kubernetes" && a.What == "condition" && cfg.Kubernetes.Condition:
			err = newKube(cfg.Kubernetes).condition(ctx, ni.Part.Node, "RootInSeveralJobs", ni.Incident.Summary)
		default:
			continue
		}
		if err != nil {
			a.Error = err.Error()
		} else {
			a.Applied = true
		}
	}
}

func runScontrol(ctx context.Context, cfg SlurmConfig, args []string) error {
	bin := cfg.Scontrol
	if bin == "" {
		bin = "scontrol"
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// kube is the few calls to the API server the node actions need.
type kube struct {
	base, tokenFile string
	client          *http.Client
	err             error
}

func newKube(cfg KubernetesConfig) *kube {
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
	k := &kube{base: cfg.APIServer, tokenFile: cfg.TokenFile}
	if k.base == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" {
			k.err = errors.New("not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST) and no api_server configured")
			return k
		}
		k.base = "https://" + host + ":" + port
	}
	if k.tokenFile == "" {
		k.tokenFile = sa + "token"
	}
	ca := cfg.CAFile
	if ca == "" && cfg.APIServer == "" {
		ca = sa + "ca.crt"
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			k.err = fmt.Errorf("kubernetes CA: %w", err)
			return k
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	k.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return k
}

func (k *kube) do(ctx context.Context, method, path, ctype string, body any, out any) error {
	if k.err != nil {
		return k.err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.base+path, rd)
	if err != nil {
		return err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if tok, err := os.ReadFile(k.tokenFile); err == nil {
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("kubernetes token: %w", err)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("kubernetes %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("kubernetes %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b[:min(len(b), 300)]))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

type kubeTaint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// taint adds the taint unless the node has it, guarded by the node's resourceVersion so
// that a concurrent change of the node's taints is not overwritten.
func (k *kube) taint(ctx context.Context, node, value string) error {
	var n struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Spec struct {
			Taints []kubeTaint `json:"taints"`
		} `json:"spec"`
	}
	path := "/api/v1/nodes/" + url.PathEscape(node)
	if err := k.do(ctx, http.MethodGet, path, "", nil, &n); err != nil {
		return err
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintKey {
			return nil
		}
	}
	t := kubeTaint{Key: TaintKey, Value: value, Effect: "NoSchedule"}
	patch := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": n.Metadata.ResourceVersion}}
	if len(n.Spec.Taints) == 0 {
		patch = append(patch, map[string]any{"op": "add", "path": "/spec/taints", "value": []kubeTaint{t}})
	} else {
		patch = append(patch, map[string]any{"op": "add", "path": "/spec/taints/-", "value": t})
	}
	return k.do(ctx, http.MethodPatch, path, "application/json-patch+json", patch, nil)
}

// condition sets the node condition (conditions merge by type).
func (k *kube) condition(ctx context.Context, node, why, msg string) error {
	now := time.Now().UTC().Format(time.RFC3339)
	patch := map[string]any{"status": map[string]any{"conditions": []map[string]string{{
		"type": ConditionType, "status": "True", "reason": why, "message": msg, "lastHeartbeatTime": now, "lastTransitionTime": now}}}}
	return k.do(ctx, http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(node)+"/status", "application/strategic-merge-patch+json", patch, nil)
}
