package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ncclwatch/watchdog/alert"
)

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec yaml.Node         `yaml:"spec"`
}

type podSpec struct {
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
	Volumes        []struct {
		Name string `yaml:"name"`
	} `yaml:"volumes"`
}

type container struct {
	Name         string `yaml:"name"`
	Image        string `yaml:"image"`
	VolumeMounts []struct {
		Name string `yaml:"name"`
	} `yaml:"volumeMounts"`
	EnvFrom []struct {
		ConfigMapRef struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
	} `yaml:"envFrom"`
	Resources struct {
		Limits   map[string]any `yaml:"limits"`
		Requests map[string]any `yaml:"requests"`
	} `yaml:"resources"`
	SecurityContext map[string]any `yaml:"securityContext"`
}

func readObjects(t *testing.T, path string) []k8sObject {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []k8sObject
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if o.Kind == "" {
			continue // an empty document
		}
		if o.APIVersion == "" || o.Metadata.Name == "" {
			t.Errorf("%s: %s without apiVersion or name", path, o.Kind)
		}
		out = append(out, o)
	}
}

// podOf returns the pod spec of a Pod or of a Deployment's template.
func podOf(t *testing.T, o k8sObject) podSpec {
	t.Helper()
	var ps podSpec
	switch o.Kind {
	case "Pod":
		if err := o.Spec.Decode(&ps); err != nil {
			t.Fatal(err)
		}
	case "Deployment":
		var d struct {
			Template struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
		}
		if err := o.Spec.Decode(&d); err != nil {
			t.Fatal(err)
		}
		ps = d.Template.Spec
	}
	return ps
}

// TestKubernetesManifests checks the rendered manifests hang together: every volume mount
// names a volume, every envFrom a ConfigMap of the release, every container has requests,
// limits and a securityContext that forbids privilege escalation.
func TestKubernetesManifests(t *testing.T) {
	objs := append(readObjects(t, "kubernetes/ncclwatch.yaml"), readObjects(t, "kubernetes/training-pod.yaml")...)
	kinds := map[string]int{}
	configMaps := map[string]k8sObject{}
	for _, o := range objs {
		kinds[o.Kind]++
		if o.Kind == "ConfigMap" {
			configMaps[o.Metadata.Name] = o
		}
	}
	for _, k := range []string{"Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "Pod", "PodMonitor", "ServiceMonitor", "PrometheusRule"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in deploy/kubernetes", k)
		}
	}
	for _, o := range objs {
		if o.Kind != "Pod" && o.Kind != "Deployment" {
			continue
		}
		ps := podOf(t, o)
		vols := map[string]bool{}
		for _, v := range ps.Volumes {
			vols[v.Name] = true
		}
		for _, c := range append(ps.InitContainers, ps.Containers...) {
			where := o.Kind + " " + o.Metadata.Name + " container " + c.Name
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					t.Errorf("%s mounts volume %q, which the pod does not define", where, m.Name)
				}
			}
			for _, e := range c.EnvFrom {
				if _, ok := configMaps[e.ConfigMapRef.Name]; !ok {
					t.Errorf("%s loads ConfigMap %q, which the release does not define", where, e.ConfigMapRef.Name)
				}
			}
			if c.Name == "trainer" {
				continue // the user's container
			}
			if len(c.Resources.Requests) == 0 || len(c.Resources.Limits) == 0 {
				t.Errorf("%s: no requests or limits", where)
			}
			if c.SecurityContext["allowPrivilegeEscalation"] != false || c.SecurityContext["readOnlyRootFilesystem"] != true {
				t.Errorf("%s: securityContext %v", where, c.SecurityContext)
			}
		}
	}
	// The training container gets exactly the NCCL settings the docs name.
	nccl, ok := configMaps["ncclwatch-nccl"]
	if !ok {
		t.Fatal("no ConfigMap ncclwatch-nccl")
	}
	want := map[string]string{"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL,NET",
		"NCCL_DEBUG_FILE": "/var/log/nccl/nccl.%h.%p.log", "NCCL_DEBUG_TIMESTAMP_LEVELS": "ALL",
		"NCCL_DEBUG_TIMESTAMP_FORMAT": "[%F %T.%6f] "}
	for k, v := range want {
		if nccl.Data[k] != v {
			t.Errorf("ncclwatch-nccl %s = %q, want %q", k, nccl.Data[k], v)
		}
	}
	// The rules inside the PrometheusRule are the rule file's.
	for _, o := range objs {
		if o.Kind != "PrometheusRule" {
			continue
		}
		var got, wantRules any
		if err := o.Spec.Decode(&got); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(rulesFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &wantRules); err != nil {
			t.Fatal(err)
		}
		gb, _ := yaml.Marshal(got)
		wb, _ := yaml.Marshal(wantRules)
		if !bytes.Equal(gb, wb) {
			t.Errorf("the PrometheusRule differs from %s: run make k8s-manifests", rulesFile)
		}
	}
}

// TestExamples: the example alert routing parses, and the shell scripts are valid.
func TestExamples(t *testing.T) {
	if _, err := alert.LoadConfig("examples/alerts.yaml"); err != nil {
		t.Error(err)
	}
	scripts, _ := filepath.Glob("slurm/*.sh")
	scripts = append(scripts, "tools/install-prometheus.sh")
	for _, s := range scripts {
		shell := "sh"
		if b, err := os.ReadFile(s); err == nil && strings.HasPrefix(string(b), "#!/bin/bash") {
			shell = "bash"
		}
		if out, err := exec.Command(shell, "-n", s).CombinedOutput(); err != nil {
			t.Errorf("%s -n %s: %v\n%s", shell, s, err, out)
		}
		if st, err := os.Stat(s); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable", s)
		}
	}
	// The task prolog gives a job the NCCL settings the Kubernetes ConfigMap gives a pod.
	cmd := exec.Command("sh", "slurm/task-prolog.sh")
	cmd.Env = append(os.Environ(), "SLURM_JOB_ID=42", "NCCLWATCH_DISABLE=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("task-prolog.sh: %v", err)
	}
	want := "export NCCL_DEBUG=INFO\nexport NCCL_DEBUG_SUBSYS=INIT,COLL,NET\n" +
		"export NCCL_DEBUG_FILE=/var/log/nccl/42/nccl.%h.%p.log\nexport NCCL_DEBUG_TIMESTAMP_LEVELS=ALL\n" +
		"export NCCL_DEBUG_TIMESTAMP_FORMAT=[%F_%T.%6f]_\n"
	if string(out) != want {
		t.Errorf("task-prolog.sh printed\n%s\nwant\n%s", out, want)
	}
	cmd = exec.Command("sh", "slurm/task-prolog.sh")
	cmd.Env = append(os.Environ(), "SLURM_JOB_ID=42", "NCCLWATCH_DISABLE=1")
	if out, err := cmd.Output(); err != nil || len(out) != 0 {
		t.Errorf("task-prolog.sh with NCCLWATCH_DISABLE=1: %q %v", out, err)
	}
}
