{{- define "k8s-ai-tenant.labels" -}}
app.kubernetes.io/name: k8s-ai-tenant
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
k8s-ai/tenant: {{ .Values.tenant | quote }}
{{- end -}}

{{- define "k8s-ai-tenant.namespace" -}}
{{- required "namespace.name is required: the namespace step Jobs run in" .Values.namespace.name -}}
{{- end -}}
