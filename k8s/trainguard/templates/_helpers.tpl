{{- define "trainguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-trainguard, or the release name when it already contains the chart's name. */}}
{{- define "trainguard.fullname" -}}
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

{{- define "trainguard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "trainguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "trainguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trainguard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "trainguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "trainguard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "trainguard.secretName" -}}
{{- default (printf "%s-tokens" (include "trainguard.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/* The Kubernetes scheduler kinds used by any cluster, comma-separated (jobset, pytorchjob). */}}
{{- define "trainguard.kubeKinds" -}}
{{- $kinds := list -}}
{{- range $name, $cluster := .Values.clusters -}}
{{- $kind := (($cluster | default dict).scheduler | default dict).kind | default "" -}}
{{- if and (has $kind (list "jobset" "pytorchjob")) (not (has $kind $kinds)) -}}
{{- $kinds = append $kinds $kind -}}
{{- end -}}
{{- end -}}
{{- $kinds | sortAlpha | join "," -}}
{{- end -}}

{{/* The responder's YAML configuration (docs/configuration.md). */}}
{{- define "trainguard.config" -}}
{{- $clusters := dict -}}
{{- range $name, $cluster := .Values.clusters -}}
{{- $c := deepCopy ($cluster | default dict) -}}
{{- if not $c.nodes }}{{ $_ := unset $c "nodes" }}{{ end -}}
{{- if not $c.policy }}{{ $_ := unset $c "policy" }}{{ end -}}
{{- if $c.scheduler -}}
{{- if has ($c.scheduler.kind | default "") (list "jobset" "pytorchjob") -}}
{{- $_ := set $c "scheduler" (merge (dict "in_cluster" true "cluster" $name) $c.scheduler) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $clusters $name $c -}}
{{- end -}}
{{- $name := include "trainguard.fullname" . -}}
{{- $config := dict
  "host" "0.0.0.0"
  "port" (int .Values.responder.port)
  "db_path" "/data/trainguard.db"
  "webhook_token_file" "/etc/trainguard/tokens/webhook-token"
  "operator_token_file" "/etc/trainguard/tokens/operator-token"
  "default_mode" .Values.responder.defaultMode
  "log_level" .Values.responder.logLevel
  "clusters" $clusters
  "allowed_hosts" (list $name (printf "%s.%s" $name .Release.Namespace) (printf "%s.%s.svc" $name .Release.Namespace) (printf "%s.%s.svc.cluster.local" $name .Release.Namespace)) -}}
{{- if .Values.responder.prometheusUrl -}}
{{- $_ := set $config "prometheus_url" .Values.responder.prometheusUrl -}}
{{- end -}}
{{- if .Values.database.url -}}
{{- $_ := set $config "store" (dict "url" .Values.database.url) -}}
{{- end -}}
{{- toYaml (merge $config (deepCopy .Values.responder.config)) -}}
{{- end -}}
