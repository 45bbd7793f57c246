{{/* Names. */}}
{{- define "ncclwatch.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ncclwatch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ncclwatch.detector" -}}
{{- printf "%s-detector" (include "ncclwatch.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object: the selector labels and what only describes. */}}
{{- define "ncclwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ncclwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ncclwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ncclwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ncclwatch.detectorSelector" -}}
{{ include "ncclwatch.selectorLabels" . }}
app.kubernetes.io/component: detector
{{- end -}}

{{/* The detector pod's labels: ours win over detector.podLabels, so that a pod label can
never repeat a key (strict decoders and yamllint refuse that) or unselect the pod. */}}
{{- define "ncclwatch.detectorPodLabels" -}}
{{- $ours := include "ncclwatch.labels" . | fromYaml }}
{{- $_ := set $ours "app.kubernetes.io/component" "detector" }}
{{- $_ := set $ours "ncclwatch.io/scrape-job" "ncclwatch-detector" }}
{{- toYaml (merge $ours (deepCopy .Values.detector.podLabels)) }}
{{- end -}}

{{- define "ncclwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The embedded etcd runs in the detector when no endpoints are given. */}}
{{- define "ncclwatch.embeddedEtcd" -}}
{{- if not .Values.etcd.endpoints -}}true{{- end -}}
{{- end -}}

{{/* etcd endpoints for clients: the cluster's, or the detector Service's embedded etcd. */}}
{{- define "ncclwatch.etcdEndpoints" -}}
{{- if .Values.etcd.endpoints -}}
{{- join "," .Values.etcd.endpoints -}}
{{- else -}}
{{- printf "http://%s.%s.svc:2379" (include "ncclwatch.detector" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* etcd credentials: one identity per part (docs/security.md#one-identity-per-part). Each
role's client certificate is the Secret <secretPrefix><role>, CN the role's etcd user; the
detector, each job's sidecars and the roles hook mount their own and nothing else. */}}
{{- define "ncclwatch.etcdTLSSecret" -}}
{{- $prefix := .root.Values.etcd.tls.secretPrefix | default (printf "%s-etcd-tls-" (include "ncclwatch.fullname" .root)) -}}
{{- printf "%s%s" $prefix .role | trunc 253 -}}
{{- end -}}

{{/* The jobs with a per-job sidecar role: sidecar.jobs and the example pod's, comma-joined. */}}
{{- define "ncclwatch.sidecarJobs" -}}
{{- $jobs := .Values.sidecar.jobs | default list -}}
{{- if .Values.examplePod.enabled }}{{ $jobs = append $jobs .Values.examplePod.job }}{{ end -}}
{{- join "," (uniq $jobs) -}}
{{- end -}}

{{/* The sidecars log in as their job's user (etcdRole job, auth on). */}}
{{- define "ncclwatch.perJobSidecars" -}}
{{- if and .Values.etcd.auth.user (eq .Values.sidecar.etcdRole "job") -}}true{{- end -}}
{{- end -}}

{{/* The hook Jobs that create and remove the per-job roles: per-job sidecars and jobs to
create them for. */}}
{{- define "ncclwatch.rolesHook" -}}
{{- if and (include "ncclwatch.perJobSidecars" .) (include "ncclwatch.sidecarJobs" .) -}}true{{- end -}}
{{- end -}}

{{/* Settings that cannot work together fail the render, naming the fix. */}}
{{- define "ncclwatch.checkEtcd" -}}
{{- $e := .Values.etcd -}}
{{- if and $e.tls.certManager.enabled (not $e.tls.enabled) -}}
{{- fail "etcd.tls.certManager.enabled needs etcd.tls.enabled" -}}
{{- end -}}
{{- if and $e.tls.certManager.enabled (not $e.tls.certManager.issuerRef.name) -}}
{{- fail "etcd.tls.certManager.enabled: etcd.tls.certManager.issuerRef.name must name the issuer of etcd's client CA" -}}
{{- end -}}
{{- if $e.auth.user -}}
{{- if eq .Values.sidecar.etcdRole "shared" -}}
{{- if not $e.auth.sidecar.user -}}
{{- fail "sidecar.etcdRole is shared: etcd.auth.sidecar.user must name the sidecars' own user (role ncclwatch-sidecar); the detector's never goes into training pods" -}}
{{- end -}}
{{- if eq $e.auth.sidecar.user $e.auth.user -}}
{{- fail "etcd.auth.sidecar.user is the detector's user: the sidecars need their own (role ncclwatch-sidecar)" -}}
{{- end -}}
{{- if not $e.auth.sidecar.passwordSecret.name -}}
{{- fail "etcd.auth.sidecar.user is set: etcd.auth.sidecar.passwordSecret.name must name its Secret" -}}
{{- end -}}
{{- else if include "ncclwatch.rolesHook" . -}}
{{- if not $e.tls.enabled -}}
{{- fail "sidecar.etcdRole job with etcd.auth: the per-job sidecars log in by their own client certificate, so etcd.tls must be enabled (or use sidecar.etcdRole shared)" -}}
{{- end -}}
{{- if not $e.auth.root.passwordSecret.name -}}
{{- fail "sidecar.etcdRole job: etcd.auth.root.passwordSecret.name must name the Secret of etcd's root password, for the hook that creates each job's role" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A client certificate Secret as a volume named etcd-tls. */}}
{{- define "ncclwatch.tlsVolume" -}}
- name: etcd-tls
  secret:
    secretName: {{ include "ncclwatch.etcdTLSSecret" . }}
    defaultMode: 0444
    items:
      - {key: {{ .root.Values.etcd.tls.caKey }}, path: ca.crt}
      - {key: {{ .root.Values.etcd.tls.certKey }}, path: tls.crt}
      - {key: {{ .root.Values.etcd.tls.keyKey }}, path: tls.key}
{{- end -}}

{{/* A password Secret as a volume named etcd-auth. */}}
{{- define "ncclwatch.passwordVolume" -}}
- name: etcd-auth
  secret:
    secretName: {{ .name }}
    defaultMode: 0444
    items:
      - key: {{ .key }}
        path: password
{{- end -}}

{{/* The detector's credentials: its own certificate and password. */}}
{{- define "ncclwatch.etcdVolumes" -}}
{{- if .Values.etcd.tls.enabled }}
{{ include "ncclwatch.tlsVolume" (dict "root" . "role" "detector") }}
{{- end }}
{{- if .Values.etcd.auth.passwordSecret.name }}
{{ include "ncclwatch.passwordVolume" .Values.etcd.auth.passwordSecret }}
{{- end }}
{{- end -}}

{{/* A training pod's sidecar credentials (call with dict "root" $ "job" <job>): its job's
certificate (etcdRole job), or the shared sidecar's certificate and password. */}}
{{- define "ncclwatch.sidecarEtcdVolumes" -}}
{{- $v := .root.Values }}
{{- $role := "sidecar" }}
{{- if eq $v.sidecar.etcdRole "job" }}{{ $role = printf "sidecar-%s" .job }}{{ end }}
{{- if $v.etcd.tls.enabled }}
{{ include "ncclwatch.tlsVolume" (dict "root" .root "role" $role) }}
{{- end }}
{{- if and $v.etcd.auth.user (eq $v.sidecar.etcdRole "shared") }}
{{ include "ncclwatch.passwordVolume" $v.etcd.auth.sidecar.passwordSecret }}
{{- end }}
{{- end -}}

{{- define "ncclwatch.etcdVolumeMounts" -}}
{{- if .Values.etcd.tls.enabled }}
- name: etcd-tls
  mountPath: /etc/ncclwatch/etcd-tls
  readOnly: true
{{- end }}
{{- if .Values.etcd.auth.passwordSecret.name }}
- name: etcd-auth
  mountPath: /etc/ncclwatch/etcd-auth
  readOnly: true
{{- end }}
{{- end -}}

{{- define "ncclwatch.sidecarEtcdVolumeMounts" -}}
{{- if .Values.etcd.tls.enabled }}
- name: etcd-tls
  mountPath: /etc/ncclwatch/etcd-tls
  readOnly: true
{{- end }}
{{- if and .Values.etcd.auth.user (eq .Values.sidecar.etcdRole "shared") }}
- name: etcd-auth
  mountPath: /etc/ncclwatch/etcd-auth
  readOnly: true
{{- end }}
{{- end -}}

{{/* The NCCL settings a training container needs (docs/quickstart-kubernetes.md); in
plugin mode NCCL loads the profiler plugin and logs at profilerPlugin.ncclDebug. */}}
{{- define "ncclwatch.ncclEnv" -}}
{{- $debug := "INFO" }}
{{- if .Values.profilerPlugin.enabled }}
{{- $debug = .Values.profilerPlugin.ncclDebug }}
{{- if not (has $debug (list "WARN" "INFO")) }}
{{- fail (printf "profilerPlugin.ncclDebug is %q: want WARN or INFO" $debug) }}
{{- end }}
{{- end }}
NCCL_DEBUG: {{ $debug }}
{{- if eq $debug "INFO" }}
NCCL_DEBUG_SUBSYS: INIT,COLL,NET
{{- end }}
NCCL_DEBUG_FILE: {{ printf "%s/nccl.%%h.%%p.log" .Values.sidecar.logDir }}
NCCL_DEBUG_TIMESTAMP_LEVELS: ALL
NCCL_DEBUG_TIMESTAMP_FORMAT: "[%F %T.%6f] "
{{- if .Values.profilerPlugin.enabled }}
NCCL_PROFILER_PLUGIN: {{ include "ncclwatch.pluginPath" . }}
NCCLWATCH_PROFILER_DIR: {{ .Values.profilerPlugin.regionDir }}
{{- end }}
{{- end -}}

{{/* The plugin's path inside the trainer: profilerPlugin.dir, filled by the init container. */}}
{{- define "ncclwatch.pluginPath" -}}
{{- printf "%s/libnccl-profiler-ncclwatch.so" (trimSuffix "/" .Values.profilerPlugin.dir) -}}
{{- end -}}

{{/* The Kubernetes node actions of node incidents the detector takes with its own service
account (detector.config.fleet.actions.kubernetes: taint, condition), space-separated;
empty when none is on, or when api_server or token_file point the actions at another
identity. Each one on gets its RBAC and the pod its token; none, neither. */}}
{{- define "ncclwatch.nodeActions" -}}
{{- $k := dig "fleet" "actions" "kubernetes" dict .Values.detector.config | default dict -}}
{{- if not (or (get $k "api_server") (get $k "token_file")) -}}
{{- $on := list -}}
{{- range $a := list "taint" "condition" }}{{ if get $k $a }}{{ $on = append $on $a }}{{ end }}{{ end -}}
{{- join " " $on -}}
{{- end -}}
{{- end -}}
