{{/* Names, labels, images and the Secret's values shared by every template. */}}

{{- define "aside.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "aside.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "aside.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "aside.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* A component's object name: <fullname>-<component>. */}}
{{- define "aside.component" -}}
{{- printf "%s-%s" (include "aside.fullname" .root) .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "aside.selectorLabels" -}}
app.kubernetes.io/name: {{ include "aside.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{- define "aside.labels" -}}
{{ include "aside.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: aside
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "aside.image" -}}
{{- $image := index .root.Values.images .name -}}
{{- printf "%s:%s" $image.repository (toString (default .root.Chart.AppVersion $image.tag)) -}}
{{- end -}}

{{- define "aside.secretName" -}}
{{- default (include "aside.component" (dict "root" . "name" "secrets")) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* In-cluster addresses. */}}
{{- define "aside.postgresHost" -}}
{{- include "aside.component" (dict "root" . "name" "postgres") -}}
{{- end -}}

{{- define "aside.redisHost" -}}
{{- include "aside.component" (dict "root" . "name" "redis") -}}
{{- end -}}

{{- define "aside.influxUrl" -}}
{{- printf "http://%s:8086" (include "aside.component" (dict "root" . "name" "influxdb")) -}}
{{- end -}}

{{/* A headless Service's DNS name, for Prometheus' DNS discovery. */}}
{{- define "aside.dnsName" -}}
{{- printf "%s.%s.svc.%s" (include "aside.component" (dict "root" .root "name" .name)) .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{/* The security context every container of ours runs with. */}}
{{- define "aside.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "aside.podSecurity" -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ .uid }}
fsGroup: {{ .uid }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "aside.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An environment variable from the Secret. */}}
{{- define "aside.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ include "aside.secretName" .root }}
      key: {{ .key }}
{{- end -}}

{{/*
The connection budget: at the most replicas, every pool full must fit within
PostgreSQL's max_connections (less a few for the exporter, the seeder and an
operator's psql). Checked only when PostgreSQL runs in the cluster.
*/}}
{{- define "aside.checkConnectionBudget" -}}
{{- if .Values.postgres.enabled -}}
{{- $gw := .Values.gateway -}}
{{- $pods := int $gw.replicas -}}
{{- if $gw.autoscaling.enabled }}{{ $pods = int $gw.autoscaling.maxReplicas }}{{ end -}}
{{- $gateway := mul $pods (int $gw.env.GATEWAY_WORKERS) (int $gw.env.DB_POOL_MAX) -}}
{{- $core := mul (int .Values.core.replicas) (int .Values.core.env.CORE_DB_POOL_MAX) -}}
{{- $spare := 10 -}}
{{- if gt (add $gateway $core $spare) (int .Values.postgres.maxConnections) -}}
{{- fail (printf "postgres.maxConnections %d is below the pools' %d (gateway %d pods x GATEWAY_WORKERS x DB_POOL_MAX = %d, core %d, %d spare): raise it or lower the pools" (int .Values.postgres.maxConnections) (add $gateway $core $spare) $pods $gateway $core $spare) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
prometheus/prometheus.yml with in-cluster targets: each job finds its pods
through a headless Service's DNS records, so every gateway replica is scraped
on its own and Prometheus needs no access to the Kubernetes API.
*/}}
{{- define "aside.prometheusConfig" -}}
{{- $gatewayPort := ternary .Values.gateway.port .Values.gateway.metricsPort (eq .Values.profile "lab") -}}
global:
  # Short, so the bench can read a run's counters to within a couple of seconds.
  scrape_interval: 2s
  evaluation_interval: 2s

rule_files:
  - rules.yml

scrape_configs:
  - job_name: gateway
    dns_sd_configs: [{names: [{{ include "aside.dnsName" (dict "root" . "name" "gateway-metrics") }}], type: A, port: {{ $gatewayPort }}}]
  - job_name: core
    dns_sd_configs: [{names: [{{ include "aside.dnsName" (dict "root" . "name" "core-metrics") }}], type: A, port: {{ .Values.core.metricsPort }}}]
  - job_name: node
    dns_sd_configs: [{names: [{{ include "aside.dnsName" (dict "root" . "name" "node-exporter") }}], type: A, port: 9100}]
  - job_name: redis
    dns_sd_configs: [{names: [{{ include "aside.dnsName" (dict "root" . "name" "redis") }}], type: A, port: 9121}]
  - job_name: postgres
    dns_sd_configs: [{names: [{{ include "aside.dnsName" (dict "root" . "name" "postgres") }}], type: A, port: 9187}]
{{- end -}}
