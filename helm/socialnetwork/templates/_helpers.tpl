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

{{/* stores.layout, checked: shared or per-service. */}}
{{- define "socialnetwork.storeLayout" -}}
{{- $registry := include "socialnetwork.registry" . | fromYaml -}}
{{- $layout := .Values.stores.layout | default "shared" -}}
{{- if not (hasKey $registry.layouts $layout) -}}
{{- fail (printf "stores.layout: %q is not one of %s" $layout (keys $registry.layouts | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $layout -}}
{{- end }}

{{/*
Where services reach the instance INSTANCE of store STORE: its StatefulSet's Service, or
stores.STORE.external (then every instance of that store is the one external server);
call with (dict "root" $ "store" STORE "instance" INSTANCE).
*/}}
{{- define "socialnetwork.storeAddress" -}}
{{- $registry := include "socialnetwork.registry" .root | fromYaml -}}
{{- $values := get .root.Values.stores .store -}}
{{- if $values.enabled -}}
{{- printf (get $registry.stores .store).addressFormat .instance -}}
{{- else -}}
{{- required (printf "stores.%s.external is required when stores.%s.enabled is false" .store .store) $values.external -}}
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

{{/*
The environment of a service: its stores' instances, the neighbours (the local launcher's
names) and the login secret; call with (dict "root" $ "spec" SERVICE-OF-THE-REGISTRY).
*/}}
{{- define "socialnetwork.serviceEnv" -}}
{{- $root := .root -}}
{{- $registry := include "socialnetwork.registry" $root | fromYaml -}}
{{- $instances := get .spec.instances (include "socialnetwork.storeLayout" $root) -}}
{{- range $store := .spec.stores }}
- name: {{ (get $registry.stores $store).env }}
  value: {{ include "socialnetwork.storeAddress" (dict "root" $root "store" $store "instance" (get $instances $store)) | quote }}
{{- end }}
{{- range $registry.services }}
- name: {{ .urlEnv }}
  value: {{ printf "http://%s:%d" .name (int .port) | quote }}
{{- end }}
- name: {{ $registry.secretEnv }}
  valueFrom:
    secretKeyRef:
      name: {{ include "socialnetwork.loginSecretName" $root }}
      key: {{ include "socialnetwork.loginSecretKey" $root }}
{{- with $root.Values.tracing }}
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
