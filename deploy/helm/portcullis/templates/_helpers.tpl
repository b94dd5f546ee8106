{{/* The chart's name, and the release's resource name (release-chart, or the override). */}}
{{- define "portcullis.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "portcullis.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "portcullis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "portcullis.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "portcullis.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "portcullis.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The configuration's text: the config value, or the chart's file. */}}
{{- define "portcullis.config" -}}
{{- if .Values.config -}}
{{- .Values.config -}}
{{- else -}}
{{- .Files.Get "files/portcullis.yaml" -}}
{{- end -}}
{{- end -}}

{{- define "portcullis.configMapName" -}}
{{- default (printf "%s-config" (include "portcullis.fullname" .)) .Values.existingConfigMap -}}
{{- end -}}

{{/* The Secret mounted as files: yours, or the one rendered from secrets.values. */}}
{{- define "portcullis.secretName" -}}
{{- if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else if .Values.secrets.values -}}
{{- printf "%s-secrets" (include "portcullis.fullname" .) -}}
{{- else -}}
{{- fail "portcullis: set secrets.existingSecret (a Secret with one key per file the configuration reads, such as AUTH_SECRET, PORTCULLIS_ADMIN_TOKEN, REDIS_PASSWORD) or secrets.values" -}}
{{- end -}}
{{- end -}}
