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

{{/* Volumes holding etcd client credentials. */}}
{{- define "ncclwatch.etcdVolumes" -}}
{{- if .Values.etcd.tls.secretName }}
- name: etcd-tls
  secret:
    secretName: {{ .Values.etcd.tls.secretName }}
    defaultMode: 0444
{{- end }}
{{- if .Values.etcd.auth.passwordSecret.name }}
- name: etcd-auth
  secret:
    secretName: {{ .Values.etcd.auth.passwordSecret.name }}
    defaultMode: 0444
    items:
      - key: {{ .Values.etcd.auth.passwordSecret.key }}
        path: password
{{- end }}
{{- end -}}

{{/* The sidecar's etcd credentials: TLS as the detector's, and its own user's password
(etcd.auth.sidecar), else the detector's. */}}
{{- define "ncclwatch.sidecarEtcdUser" -}}
{{- .Values.etcd.auth.sidecar.user | default .Values.etcd.auth.user -}}
{{- end -}}

{{- define "ncclwatch.sidecarEtcdVolumes" -}}
{{- if .Values.etcd.tls.secretName }}
- name: etcd-tls
  secret:
    secretName: {{ .Values.etcd.tls.secretName }}
    defaultMode: 0444
{{- end }}
{{- $pw := .Values.etcd.auth.passwordSecret }}
{{- if .Values.etcd.auth.sidecar.user }}
{{- $pw = .Values.etcd.auth.sidecar.passwordSecret }}
{{- if not $pw.name }}
{{- fail "etcd.auth.sidecar.user is set: etcd.auth.sidecar.passwordSecret.name must name its Secret" }}
{{- end }}
{{- end }}
{{- if $pw.name }}
- name: etcd-auth
  secret:
    secretName: {{ $pw.name }}
    defaultMode: 0444
    items:
      - key: {{ $pw.key }}
        path: password
{{- end }}
{{- end -}}

{{- define "ncclwatch.etcdVolumeMounts" -}}
{{- if .Values.etcd.tls.secretName }}
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
{{- if .Values.etcd.tls.secretName }}
- name: etcd-tls
  mountPath: /etc/ncclwatch/etcd-tls
  readOnly: true
{{- end }}
{{- if or .Values.etcd.auth.passwordSecret.name .Values.etcd.auth.sidecar.user }}
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
