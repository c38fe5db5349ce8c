{{/* The chart's name, or nameOverride. */}}
{{- define "gateway-leader.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The objects' base name: fullnameOverride, else the release's name when it holds the chart's name
(release gateway-leader names the objects as deploy/base does), else <release>-<name>. Short
enough for the longest suffix (-leader-election) in a 63-character name.
*/}}
{{- define "gateway-leader.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 47 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gateway-leader.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 47 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 47 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gateway-leader.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gateway-leader.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gateway-leader.labels" -}}
{{ include "gateway-leader.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gateway-leader.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gateway-leader.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespace of the Lease, and of the Role that lets the replicas use it. */}}
{{- define "gateway-leader.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.kubernetes.namespace -}}
{{- end -}}

{{/* Whether the replicas hold a Lease: the Role and its binding exist only then. */}}
{{- define "gateway-leader.usesLease" -}}
{{- if and .Values.leaderElection.enable (eq .Values.leaderElection.backend "kubernetes") -}}
true
{{- end -}}
{{- end -}}

{{/* A duration as values.schema.json accepts it (15s, 1500ms, 2m, 1h), in milliseconds. */}}
{{- define "gateway-leader.ms" -}}
{{- $n := regexFind "^[0-9]+" . -}}
{{- $unit := trimPrefix $n . -}}
{{- $factor := get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000) $unit -}}
{{- mul (atoi $n) $factor -}}
{{- end -}}

{{/*
What the schema cannot say: the timing rule of docs/leader-election.md (with the binary's
defaults for the durations left empty), and a grace period that covers a graceful stop (draining
writes up to the renew deadline, the release up to another, 1 s quiet, 2 s for the last
Event; docs/operations.md, "The shutdown budget").
*/}}
{{- define "gateway-leader.validate" -}}
{{- $le := .Values.leaderElection -}}
{{- $lease := include "gateway-leader.ms" (default "15s" $le.leaseDuration) | atoi -}}
{{- $renew := include "gateway-leader.ms" (default "10s" $le.renewDeadline) | atoi -}}
{{- $retry := include "gateway-leader.ms" (default "2s" $le.retryPeriod) | atoi -}}
{{- if and $le.enable (le $lease $renew) -}}
{{- fail (printf "leaderElection.leaseDuration (%dms) must be longer than leaderElection.renewDeadline (%dms)" $lease $renew) -}}
{{- end -}}
{{- if and $le.enable (le (mul $renew 5) (mul $retry 6)) -}}
{{- fail (printf "leaderElection.renewDeadline (%dms) must be longer than 1.2 x leaderElection.retryPeriod (%dms)" $renew $retry) -}}
{{- end -}}
{{- if and .Values.sidecar.enabled (not .Values.sidecar.controller.image) -}}
{{- fail "sidecar.controller.image is required with sidecar.enabled: the controller that runs beside the proxy" -}}
{{- end -}}
{{- /* src/shutdown.rs graceful_stop_budget: the binary never takes more than 25 s. */ -}}
{{- $stop := min (add (mul $renew 2) 3000) 25000 -}}
{{- if le (mul (int .Values.terminationGracePeriodSeconds) 1000) $stop -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be longer than a graceful stop: the smaller of 2 x renewDeadline + 3s and 25s = %dms" .Values.terminationGracePeriodSeconds $stop) -}}
{{- end -}}
{{- end -}}

{{/* The Secret the etcd or Redis lock mounts, and the keys it mounts as (key, file, flag). */}}
{{- define "gateway-leader.secretFiles" -}}
{{- $le := .Values.leaderElection -}}
{{- $files := list -}}
{{- if eq $le.backend "etcd" -}}
{{- $s := $le.etcd.secret -}}
{{- range $f := list (list $s.passwordKey "password" "--etcd-password-file") (list $s.caKey "ca.crt" "--etcd-ca-file") (list $s.certKey "tls.crt" "--etcd-cert-file") (list $s.keyKey "tls.key" "--etcd-key-file") -}}
{{- if index $f 0 }}{{ $files = append $files $f }}{{ end -}}
{{- end -}}
{{- else if eq $le.backend "redis" -}}
{{- $s := $le.redis.secret -}}
{{- $sentinel := "" -}}
{{- if $le.redis.sentinel.urls }}{{ $sentinel = $s.sentinelPasswordKey }}{{ end -}}
{{- range $f := list (list $s.passwordKey "password" "--redis-password-file") (list $sentinel "sentinel-password" "--redis-sentinel-password-file") (list $s.caKey "ca.crt" "--redis-ca-file") -}}
{{- if index $f 0 }}{{ $files = append $files $f }}{{ end -}}
{{- end -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}

{{- define "gateway-leader.secretName" -}}
{{- $le := .Values.leaderElection -}}
{{- $s := get $le $le.backend -}}
{{- default (printf "%s-%s" (include "gateway-leader.fullname" .) $le.backend) $s.secret.name -}}
{{- end -}}

{{- define "gateway-leader.secretDir" -}}
/var/run/secrets/gateway-leader/{{ .Values.leaderElection.backend }}
{{- end -}}

{{/* The sidecar controller's kubeconfig: the proxy, no credentials; what `gateway-leader::proxy::kubeconfig` writes (tests/helm_chart.rs). */}}
{{- define "gateway-leader.proxyKubeconfig" -}}
{{- $addr := .Values.sidecar.proxyListen | replace "localhost:" "127.0.0.1:" -}}
apiVersion: v1
kind: Config
clusters:
- name: gateway-leader-proxy
  cluster:
    server: http://{{ $addr }}
contexts:
- name: gateway-leader-proxy
  context:
    cluster: gateway-leader-proxy
    user: gateway-leader-proxy
users:
- name: gateway-leader-proxy
  user: {}
current-context: gateway-leader-proxy
{{ end -}}
