{{/* The labels every object carries: the base's two, and Helm's own. */}}
{{- define "wasmop.labels" -}}
app.kubernetes.io/name: wasmop
app.kubernetes.io/component: host
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* What selects the host's Pods: fixed, so an upgrade never orphans them. */}}
{{- define "wasmop.selector" -}}
app.kubernetes.io/name: wasmop
app.kubernetes.io/component: host
{{- end -}}

{{/* The image reference: by digest when one is given. */}}
{{- define "wasmop.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}
