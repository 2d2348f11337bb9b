{{/* Name of the chart, or nameOverride. */}}
{{- define "packd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects, at most 63 characters. */}}
{{- define "packd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels that select the release's pods; never change them on upgrade. */}}
{{- define "packd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "packd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: planner
{{- end }}

{{/* Labels of every object. */}}
{{- define "packd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "packd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: packd
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "packd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "packd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The bundled Redis's name and its selector labels. */}}
{{- define "packd.redisName" -}}
{{- printf "%s-redis" (include "packd.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "packd.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "packd.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: plan-store
{{- end }}

{{/* Labels of the bundled Redis's objects. */}}
{{- define "packd.redisLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "packd.redisSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: packd
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "packd.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Checks between values that a JSON schema cannot express. The chart refuses
to render rather than produce a pod the kubelet would SIGKILL mid-drain.
*/}}
{{- define "packd.checkValues" -}}
{{- $notServing := add .Values.config.drainDelay .Values.config.gracePeriod }}
{{- /* 2 s after the grace period: planning in flight stops at its next poll and the last answers leave. */}}
{{- $drain := add .Values.preStopSleepSeconds $notServing 2 }}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $drain) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be at least preStopSleepSeconds + config.drainDelay + config.gracePeriod + 2 s to stop planning and send the last answers (%v)" .Values.terminationGracePeriodSeconds $drain) }}
{{- end }}
{{- $live := mul .Values.probes.liveness.periodSeconds .Values.probes.liveness.failureThreshold }}
{{- if le (int $live) (int $notServing) }}
{{- fail (printf "probes.liveness gives up after %v s, within the %v s drain (config.drainDelay + config.gracePeriod)" $live $notServing) }}
{{- end }}
{{- if and .Values.planStore.enabled (not .Values.planStore.secret.name) }}
{{- fail "planStore.enabled needs planStore.secret.name: the Secret with the store's url and password (docs/deploy.md)" }}
{{- end }}
{{- if and .Values.planStore.bundled.enabled (not .Values.planStore.enabled) }}
{{- fail "planStore.bundled.enabled needs planStore.enabled: the bundled Redis is only there to be packd's plan store" }}
{{- end }}
{{- if and .Values.security.tls.enabled (not .Values.security.tls.secretName) }}
{{- fail "security.tls.enabled needs security.tls.secretName: the kubernetes.io/tls Secret with tls.crt and tls.key (docs/operators.md, Security)" }}
{{- end }}
{{- if and .Values.security.tls.clientCaKey (not .Values.security.tls.enabled) }}
{{- fail "security.tls.clientCaKey needs security.tls.enabled: client certificates are only checked over TLS" }}
{{- end }}
{{- if and .Values.security.auth.enabled (not .Values.security.auth.secretName) }}
{{- fail "security.auth.enabled needs security.auth.secretName: the Secret with the accepted tokens, one a line" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail (printf "autoscaling.minReplicas (%v) is above autoscaling.maxReplicas (%v)" .Values.autoscaling.minReplicas .Values.autoscaling.maxReplicas) }}
{{- end }}
{{- end }}

{{/*
True (non-empty) when packd reads files from Secrets: the pod then gets an
fsGroup, because the files are mode 0440 (readable by packd's group only).
*/}}
{{- define "packd.secretFiles" -}}
{{- if or .Values.planStore.enabled .Values.security.tls.enabled .Values.security.auth.enabled }}true{{ end }}
{{- end }}
