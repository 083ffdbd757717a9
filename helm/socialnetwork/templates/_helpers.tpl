{{/* The services and stores: files/registry.yaml, generated from socialbench/registry.py. */}}
{{- define "socialnetwork.registry" -}}
{{- .Files.Get "files/registry.yaml" -}}
{{- end }}

{{/* Labels of every object; call with (dict "root" $ "name" NAME "component" KIND). */}}
{{- define "socialnetwork.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: socialnetwork
app.kubernetes.io/component: {{ .component }}
{{ include "socialnetwork.selector" . }}
{{- end }}

{{/* Selector labels; call with (dict "root" $ "name" NAME). */}}
{{- define "socialnetwork.selector" -}}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/name: {{ .name }}
{{- end }}

{{/* The socialbench image; call with (dict "root" $ "override" MAP-OR-NIL). */}}
{{- define "socialnetwork.image" -}}
{{- $image := mergeOverwrite (deepCopy .root.Values.image) (.override | default dict) -}}
{{- printf "%s:%s" $image.repository ($image.tag | default .root.Chart.AppVersion) -}}
{{- end }}

{{- define "socialnetwork.pullPolicy" -}}
{{- $image := mergeOverwrite (deepCopy .root.Values.image) (.override | default dict) -}}
{{- $image.pullPolicy -}}
{{- end }}

{{/* Where services reach store NAME: its StatefulSet, or the external address. */}}
{{- define "socialnetwork.storeAddress" -}}
{{- $registry := include "socialnetwork.registry" .root | fromYaml -}}
{{- $values := get .root.Values.stores .name -}}
{{- if $values.enabled -}}
{{- (get $registry.stores .name).address -}}
{{- else -}}
{{- required (printf "stores.%s.external is required when stores.%s.enabled is false" .name .name) $values.external -}}
{{- end -}}
{{- end }}

{{/* The Secret holding the login-token secret: the chart's own, or loginSecret.existingSecret. */}}
{{- define "socialnetwork.loginSecretName" -}}
{{- .Values.loginSecret.existingSecret | default (printf "%s-login-secret" .Release.Name) -}}
{{- end }}

{{- define "socialnetwork.loginSecretKey" -}}
{{- if .Values.loginSecret.existingSecret -}}
{{- .Values.loginSecret.existingSecretKey | default "jwt-secret" -}}
{{- else -}}
jwt-secret
{{- end -}}
{{- end }}

{{/* The environment every service gets: stores, neighbours (the local launcher's names) and the login secret. */}}
{{- define "socialnetwork.serviceEnv" -}}
{{- $root := . -}}
{{- $registry := include "socialnetwork.registry" . | fromYaml -}}
{{- range $name, $store := $registry.stores }}
- name: {{ $store.env }}
  value: {{ include "socialnetwork.storeAddress" (dict "root" $root "name" $name) | quote }}
{{- end }}
{{- range $registry.services }}
- name: {{ .urlEnv }}
  value: {{ printf "http://%s:%d" .name (int .port) | quote }}
{{- end }}
- name: {{ $registry.secretEnv }}
  valueFrom:
    secretKeyRef:
      name: {{ include "socialnetwork.loginSecretName" . }}
      key: {{ include "socialnetwork.loginSecretKey" . }}
{{- with .Values.tracing }}
{{- if .endpoint }}
- name: SOCIALBENCH_TRACING_ENDPOINT
  value: {{ .endpoint | quote }}
- name: SOCIALBENCH_TRACING_SAMPLE_RATIO
  value: {{ .sampleRatio | toString | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Scheduling of a pod; call with (dict "root" $ "own" COMPONENT-VALUES).
nodeSelector: the component's merged over scheduling.nodeSelector;
affinity, tolerations: the component's when set, else scheduling's.
*/}}
{{- define "socialnetwork.scheduling" -}}
{{- $global := .root.Values.scheduling -}}
{{- $nodeSelector := merge (deepCopy (.own.nodeSelector | default dict)) (deepCopy ($global.nodeSelector | default dict)) -}}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.own.affinity | default $global.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.own.tolerations | default $global.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Pull secrets and the pod security context of socialbench pods. */}}
{{- define "socialnetwork.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* A container that keeps serving `drainSeconds` after its pod is deleted (values.yaml). */}}
{{- define "socialnetwork.drain" -}}
{{- if gt (int .Values.drainSeconds) 0 }}
lifecycle:
  preStop:
    exec:
      command: [sleep, {{ int .Values.drainSeconds | quote }}]
{{- end }}
{{- end }}

{{/* Every service's /healthz, for init containers that wait for the stack. */}}
{{- define "socialnetwork.healthUrls" -}}
{{- $registry := include "socialnetwork.registry" . | fromYaml -}}
{{- $urls := list (printf "http://%s:%d/healthz" $registry.gateway.host (int $registry.gateway.port)) -}}
{{- range $registry.services -}}
{{- $urls = append $urls (printf "http://%s:%d/healthz" .name (int .port)) -}}
{{- end -}}
{{- toJson $urls -}}
{{- end }}

{{/* A number from values as the command line wants it: 1000000, not 1e+06. */}}
{{- define "socialnetwork.number" -}}
{{- if eq (float64 .) (float64 (int64 .)) }}{{ int64 . }}{{ else }}{{ . }}{{ end -}}
{{- end }}
