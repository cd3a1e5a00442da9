{{- define "magos-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "magos-agent.fullname" -}}
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

{{- define "magos-agent.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "magos-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: magos-fleet
{{- end }}

{{- define "magos-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "magos-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{- /* The Secret the agent keeps its renewed hub token in (templates/hub-token.yaml). */}}
{{- define "magos-agent.hubTokenSecret" -}}
{{- printf "%s-hub-token" (include "magos-agent.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* The Secret the agent keeps the key of the Workspaces' plannedInputs digest in (templates/inputs-key.yaml). */}}
{{- define "magos-agent.inputsKeySecret" -}}
{{- printf "%s-inputs-key" (include "magos-agent.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "magos-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "magos-agent.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- /* Labels of the helm test Pod: not the selector labels, so that no Service or PDB selects it. */}}
{{- define "magos-agent.testLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "magos-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: magos-fleet
{{- end }}

{{- define "magos-agent.leaderElectionGuard" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicaCount is %d but leaderElection.enabled is false: every replica would act as the agent; enable leader election or set replicaCount to 1" (int .Values.replicaCount)) }}
{{- end }}
{{- end }}
