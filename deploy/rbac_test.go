package deploy_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/ncclwatch/watchdog/detect/fleet"
)

// checkRBAC: every binding refers to a role and service accounts of the release; a pod
// mounts its service account's token if and only if that account is bound to a role (the
// node actions): an unbound token is a credential with nothing to do.
func checkRBAC(t *testing.T, objs []object) {
	t.Helper()
	roles, accounts, bound := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *rbacv1.ClusterRole:
			roles[v.Name] = true
		case *corev1.ServiceAccount:
			accounts[v.Name] = true
		case *rbacv1.Role, *rbacv1.RoleBinding:
			t.Errorf("%s %s: the chart grants cluster-wide node permissions only", o.kind, o.name)
		}
	}
	for _, o := range objs {
		b, ok := o.obj.(*rbacv1.ClusterRoleBinding)
		if !ok {
			continue
		}
		if b.RoleRef.APIGroup != rbacv1.GroupName || b.RoleRef.Kind != "ClusterRole" || !roles[b.RoleRef.Name] {
			t.Errorf("ClusterRoleBinding %s: roleRef %+v is not a ClusterRole of the release", b.Name, b.RoleRef)
		}
		for _, s := range b.Subjects {
			// Rendered manifests leave a namespaced object's namespace to kubectl -n; the
			// binding must name the release's.
			if s.Kind != rbacv1.ServiceAccountKind || s.Namespace != "ncclwatch" || !accounts[s.Name] {
				t.Errorf("ClusterRoleBinding %s: subject %+v is not a ServiceAccount of the release in namespace ncclwatch", b.Name, s)
			}
			bound[s.Name] = true
		}
	}
	for _, o := range objs {
		d, ok := o.obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		spec := d.Spec.Template.Spec
		mounts := spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken
		if want := bound[spec.ServiceAccountName]; mounts != want {
			t.Errorf("Deployment %s: mounts the token of %s: %t, want %t (bound to a role: %t)", d.Name, spec.ServiceAccountName, mounts, want, want)
		}
	}
}

// TestNodeActionsRBAC: the ClusterRole the chart renders for each choice of node actions
// is exactly what detect/fleet's actions call: they are applied against an API server that
// authorizes each request by the rendered rules (403 otherwise), every one succeeds, and
// every permission granted is used. None on: no role, no binding, no token.
func TestNodeActionsRBAC(t *testing.T) {
	const k = "detector.config.fleet.actions.kubernetes."
	for _, c := range []struct {
		name  string
		set   string
		cfg   fleet.KubernetesConfig
		rules int
	}{
		{"none", k + "taint=false", fleet.KubernetesConfig{}, 0},
		{"taint", k + "taint=true", fleet.KubernetesConfig{Taint: true}, 1},
		{"condition", k + "condition=true", fleet.KubernetesConfig{Condition: true}, 1},
		{"both", k + "taint=true," + k + "condition=true", fleet.KubernetesConfig{Taint: true, Condition: true}, 2},
		// Another identity (out of the cluster): the chart grants nothing.
		{"api_server", k + "taint=true," + k + "api_server=https://k8s.example:6443", fleet.KubernetesConfig{}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := decodeStrict(t, helmTemplate(t, "--set", c.set))
			checkRBAC(t, objs)
			var role *rbacv1.ClusterRole
			var detectorConfig string
			for _, o := range objs {
				switch v := o.obj.(type) {
				case *rbacv1.ClusterRole:
					if role != nil {
						t.Fatalf("two ClusterRoles: %s, %s", role.Name, v.Name)
					}
					role = v
				case *corev1.ConfigMap:
					if d, ok := v.Data["detector.yaml"]; ok {
						detectorConfig = d
					}
				}
			}
			// The detector reads the same switches the chart rendered its role from.
			var cfg struct {
				Fleet fleet.Config `yaml:"fleet"`
			}
			if err := yaml.Unmarshal([]byte(detectorConfig), &cfg); err != nil {
				t.Fatalf("detector.yaml: %v\n%s", err, detectorConfig)
			}
			if got := cfg.Fleet.Actions.Kubernetes; got.Taint != turnsOn(c.set, k+"taint") || got.Condition != turnsOn(c.set, k+"condition") {
				t.Errorf("detector.yaml fleet.actions.kubernetes: %+v, want what --set %s says", got, c.set)
			}
			if c.rules == 0 {
				if role != nil {
					t.Fatalf("ClusterRole %s rendered: %+v", role.Name, role.Rules)
				}
				return
			}
			if role == nil || len(role.Rules) != c.rules {
				t.Fatalf("ClusterRole: %+v, want %d rules", role, c.rules)
			}
			used := applyAuthorized(t, role.Rules, c.cfg)
			for _, r := range role.Rules {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if !used[v+" "+res] {
							t.Errorf("ClusterRole grants %s on %s, which no action calls", v, res)
						}
					}
				}
			}
		})
	}
}

// turnsOn says whether the --set list sets key to true.
func turnsOn(set, key string) bool {
	return strings.Contains(","+set+",", ","+key+"=true,")
}

// applyAuthorized applies a node incident's Kubernetes actions (cfg) against a local API
// server that allows a request only if one of rules does, and returns the "verb resource"
// pairs the actions were allowed.
func applyAuthorized(t *testing.T, rules []rbacv1.PolicyRule, cfg fleet.KubernetesConfig) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := strings.CutPrefix(r.URL.Path, "/api/v1/")
		if !ok {
			http.Error(w, "not the core API group", http.StatusNotFound)
			return
		}
		// nodes/<name>[/<subresource>] -> nodes[/<subresource>]
		parts := strings.Split(res, "/")
		if len(parts) < 2 {
			http.Error(w, "a collection", http.StatusForbidden)
			return
		}
		resource := parts[0]
		if len(parts) == 3 {
			resource += "/" + parts[2]
		}
		verb := strings.ToLower(r.Method)
		if !allows(rules, verb, resource) {
			http.Error(w, verb+" "+resource+" is forbidden", http.StatusForbidden)
			return
		}
		used[verb+" "+resource] = true
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"metadata":{"name":"n7","resourceVersion":"9"},"spec":{}}`))
		}
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.APIServer, cfg.TokenFile = srv.URL, tok
	ni := &fleet.NodeIncident{Part: fleet.Part{Kind: fleet.PartNIC, Node: "n7", ID: "mlx5_1:1"}, Jobs: make([]fleet.JobEvidence, 2)}
	ni.Incident.ID, ni.Incident.Summary = "node-1", "NIC mlx5_1:1 of n7 was the root in 2 jobs"
	ni.Actions = fleet.Suggest(ni, fleet.ActionConfig{})
	fleet.Apply(t.Context(), ni, fleet.ActionConfig{Kubernetes: cfg})
	for _, a := range ni.Actions {
		on := (a.What == "taint" && cfg.Taint) || (a.What == "condition" && cfg.Condition)
		if a.System == "kubernetes" && on && (!a.Applied || a.Error != "") {
			t.Errorf("kubernetes %s under the rendered ClusterRole: applied %t, error %q", a.What, a.Applied, a.Error)
		}
	}
	return used
}

// allows is RBAC's rule match for the core API group, without wildcards (the chart's role
// must name each verb and resource it grants).
func allows(rules []rbacv1.PolicyRule, verb, resource string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			len(r.ResourceNames) == 0 {
			return true
		}
	}
	return false
}
