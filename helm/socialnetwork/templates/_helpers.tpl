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
{{- $layout := .Values.stores.layout | toString -}}
{{- if not (hasKey $registry.layouts $layout) -}}
{{- fail (printf "stores.layout: %q is not one of %s" $layout (keys $registry.layouts | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $layout -}}
{{- end }}

{{/* The settings of one store instance ({root, instance}): its store's, with
stores.instances.<instance name> over them (resources, extraArgs, env, persistence and
scheduling; a Redis instance also its own mode, replicas and cluster); an instance that is
not in the layout, or a setting its store does not take, is refused. */}}
{{- define "socialnetwork.storeInstanceValues" -}}
{{- $registry := include "socialnetwork.registry" .root | fromYaml -}}
{{- $layout := include "socialnetwork.storeLayout" .root -}}
{{- $instances := .root.Values.stores.instances | default dict -}}
{{- $stores := dict -}}
{{- range get $registry.layouts $layout }}{{ $_ := set $stores .name .store }}{{ end -}}
{{- $names := keys $stores | sortAlpha -}}
{{- range $name, $own := $instances -}}
{{- if not (hasKey $stores $name) -}}
{{- fail (printf "stores.instances: %q is not an instance of the %s layout (%s)" $name $layout (join ", " $names)) -}}
{{- end -}}
{{- $store := get $stores $name -}}
{{- $settable := list "resources" "extraArgs" "env" "persistence" "nodeSelector" "affinity" "tolerations" -}}
{{- $redisOnly := list "mode" "replicas" "cluster" -}}
{{- range $key, $_ := $own -}}
{{- if and (has $key $redisOnly) (ne $store "redis") -}}
{{- fail (printf "stores.instances.%s.%s: only a Redis instance has its own %s (%s is a %s instance)" $name $key $key $name $store) -}}
{{- end -}}
{{- if and (has $key $redisOnly) (not $.root.Values.stores.redis.enabled) -}}
{{- fail (printf "stores.instances.%s.%s: an external Redis (stores.redis.enabled false) takes stores.redis.%s for every instance" $name $key $key) -}}
{{- end -}}
{{- if not (has $key (concat $settable $redisOnly)) -}}
{{- fail (printf "stores.instances.%s.%s: an instance may set only %s (a Redis instance also %s)" $name $key (join ", " $settable) (join ", " $redisOnly)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml (mergeOverwrite (deepCopy (get .root.Values.stores .instance.store)) (deepCopy (get $instances .instance.name | default dict))) -}}
{{- end }}

{{/* The settings of instance INSTANCE (a name) of store STORE: storeInstanceValues. Call
with (dict "root" $ "store" STORE "instance" INSTANCE). */}}
{{- define "socialnetwork.instanceValues" -}}
{{- include "socialnetwork.storeInstanceValues" (dict "root" .root "instance" (dict "name" .instance "store" .store)) -}}
{{- end }}

{{/*
The mode of Redis instance INSTANCE, checked: its own (stores.instances.<instance>.mode),
else stores.redis.mode; standalone, replicated or cluster. Call with (dict "root" $
"instance" INSTANCE).
*/}}
{{- define "socialnetwork.redisMode" -}}
{{- $values := include "socialnetwork.instanceValues" (dict "root" .root "store" "redis" "instance" .instance) | fromYaml -}}
{{- $own := get (.root.Values.stores.instances | default dict) .instance | default dict -}}
{{- $where := ternary (printf "stores.instances.%s" .instance) "stores.redis" (hasKey $own "mode") -}}
{{- $mode := $values.mode | default "standalone" | toString -}}
{{- if not (has $mode (list "standalone" "replicated" "cluster")) -}}
{{- fail (printf "%s.mode: %q is not one of cluster, replicated, standalone" $where $mode) -}}
{{- end -}}
{{- if and (eq $mode "replicated") (lt (int $values.replicas) 1) -}}
{{- fail (printf "%s.mode=replicated needs replicas of 1 or more (%s.replicas)" $where (ternary $where "stores.redis" (hasKey $own "replicas"))) -}}
{{- end -}}
{{- if and (eq $mode "cluster") (lt (int $values.cluster.masters) 1) -}}
{{- fail (printf "%s.mode=cluster needs cluster.masters of 1 or more" $where) -}}
{{- end -}}
{{- $mode -}}
{{- end }}

{{/*
The pods of instance INSTANCE of store STORE: a memcached pool's stores.memcached.replicas;
a Redis's, by its mode (redisMode): 1, the primary and its replicas, or every cluster node
(masters first); else 1. Call with (dict "root" $ "store" STORE "instance" INSTANCE).
*/}}
{{- define "socialnetwork.storePods" -}}
{{- $values := include "socialnetwork.instanceValues" . | fromYaml -}}
{{- if eq .store "memcached" -}}
{{- int $values.replicas -}}
{{- else if eq .store "redis" -}}
{{- $mode := include "socialnetwork.redisMode" . -}}
{{- if eq $mode "replicated" -}}
{{- add1 (int $values.replicas) -}}
{{- else if eq $mode "cluster" -}}
{{- mul (int $values.cluster.masters) (add1 (int $values.replicas)) -}}
{{- else -}}
1
{{- end -}}
{{- else -}}
1
{{- end -}}
{{- end }}

{{/*
Whether instance INSTANCE of store STORE has a pod each addressed by name (a headless
Service): a memcached pool, a replicated Redis or a Redis Cluster. Call as storePods.
*/}}
{{- define "socialnetwork.storeByPod" -}}
{{- if or (eq .store "memcached") (and (eq .store "redis") (ne (include "socialnetwork.redisMode" .) "standalone")) -}}
true
{{- end -}}
{{- end }}

{{/*
The address of each pod FROM..TO-1 of instance INSTANCE of store STORE, comma-separated
(<instance>-N.<instance>); call with (dict "root" $ "store" STORE "instance" INSTANCE
"from" FROM "to" TO).
*/}}
{{- define "socialnetwork.podAddresses" -}}
{{- $registry := include "socialnetwork.registry" .root | fromYaml -}}
{{- $format := (get $registry.stores .store).addressFormat -}}
{{- $hosts := list -}}
{{- range $i := untilStep (int .from) (int .to) 1 -}}
{{- $hosts = append $hosts (printf $format (printf "%s-%d.%s" $.instance $i $.instance)) -}}
{{- end -}}
{{- join "," $hosts -}}
{{- end }}

{{/*
Where services reach the instance INSTANCE of store STORE: its StatefulSet's Service; each
pod of a memcached pool or a Redis Cluster (its seed nodes), comma-separated; a replicated
Redis's primary (pod 0); or stores.STORE.external (then every instance of that store is
the one external server). Call with (dict "root" $ "store" STORE "instance" INSTANCE).
*/}}
{{- define "socialnetwork.storeAddress" -}}
{{- $registry := include "socialnetwork.registry" .root | fromYaml -}}
{{- $values := get .root.Values.stores .store -}}
{{- $format := (get $registry.stores .store).addressFormat -}}
{{- if not $values.enabled -}}
{{- required (printf "stores.%s.external (or externalSecret.name) is required when stores.%s.enabled is false" .store .store) $values.external -}}
{{- else -}}
{{- $pods := include "socialnetwork.storePods" . | int -}}
{{- if and (eq .store "redis") (eq (include "socialnetwork.redisMode" .) "replicated") -}}
{{- include "socialnetwork.podAddresses" (merge (dict "from" 0 "to" 1) .) -}}
{{- else if gt $pods 1 -}}
{{- include "socialnetwork.podAddresses" (merge (dict "from" 0 "to" $pods) .) -}}
{{- else -}}
{{- printf $format .instance -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The Secret and key of store STORE's password; call with (dict "root" $ "store" STORE). */}}
{{- define "socialnetwork.storePasswordSecret" -}}
{{- $auth := (get .root.Values.stores .store).auth -}}
{{- $auth.existingSecret | default (printf "%s-%s-password" .root.Release.Name .store) -}}
{{- end }}

{{/*
The environment items that point a service at its instance of store STORE: the address,
or the external server's URL from externalSecret, or, with auth on the chart's own store,
the password from its Secret spliced into the URL ($(VAR) is expanded by Kubernetes); for
Redis, the mode and a replicated Redis's replicas besides. Call with (dict "root" $ "store"
STORE "instance" INSTANCE).
*/}}
{{- define "socialnetwork.storeEnv" -}}
{{- $registry := include "socialnetwork.registry" .root | fromYaml -}}
{{- $values := get .root.Values.stores .store -}}
{{- $env := (get $registry.stores .store).env -}}
{{- $auth := $values.auth | default dict -}}
{{- $login := "://" -}}
{{- if and (not $values.enabled) $values.externalSecret $values.externalSecret.name }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $values.externalSecret.name }}
      key: {{ $values.externalSecret.key | default "url" }}
{{- else }}
{{- if and $values.enabled $auth.enabled }}
{{- $variable := printf "%s_PASSWORD" (upper .store) }}
{{- $login = printf "://%s:$(%s)@" ($auth.username | default "") $variable }}
- name: {{ $variable }}
  valueFrom:
    secretKeyRef:
      name: {{ include "socialnetwork.storePasswordSecret" . }}
      key: {{ $auth.existingSecretKey | default "password" }}
{{- end }}
- name: {{ $env }}
  value: {{ replace "://" $login (include "socialnetwork.storeAddress" .) | quote }}
{{- end }}
{{- if eq .store "redis" }}
{{- $mode := include "socialnetwork.redisMode" . }}
{{- if ne $mode "standalone" }}
- name: {{ $registry.redisModes.modeEnv }}
  value: {{ $mode }}
{{- end }}
{{- if eq $mode "replicated" }}
- name: {{ $registry.redisModes.replicaUrlsEnv }}
  {{- if $values.enabled }}
  value: {{ replace "://" $login (include "socialnetwork.podAddresses" (merge (dict "from" 1 "to" (include "socialnetwork.storePods" . | int)) .)) | quote }}
  {{- else }}
  value: {{ required "stores.redis.externalReplicas is required when stores.redis.mode is replicated and stores.redis.enabled is false" $values.externalReplicas | quote }}
  {{- end }}
{{- end }}
{{- end }}
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
{{- include "socialnetwork.storeEnv" (dict "root" $root "store" $store "instance" (get $instances $store)) }}
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
Scheduling of a pod; call with (dict "root" $ "own" COMPONENT-VALUES [ "name" NAME ]).
nodeSelector: the component's merged over scheduling.nodeSelector;
affinity, tolerations: the component's when set, else scheduling's;
tolerations also: the node-lost ones of scheduling.nodeLostSeconds (unless the pod's own
tolerate those taints). With NAME (a pod of the stack: a service, a store, nginx): the
spread of the stack's pods over the nodes (scheduling.spread), and its replicas kept apart
(scheduling.replicaAntiAffinity) unless its affinity sets podAntiAffinity itself.
*/}}
{{- define "socialnetwork.scheduling" -}}
{{- $global := .root.Values.scheduling -}}
{{- $nodeSelector := merge (deepCopy (.own.nodeSelector | default dict)) (deepCopy ($global.nodeSelector | default dict)) -}}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $affinity := deepCopy (.own.affinity | default $global.affinity | default dict) -}}
{{- $anti := include "socialnetwork.replicaAntiAffinity" .root -}}
{{- if and .name (ne $anti "none") (not (hasKey $affinity "podAntiAffinity")) -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "socialnetwork.selector" (dict "root" .root "name" .name) | fromYaml)) -}}
{{- if eq $anti "required" -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- else -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) -}}
{{- end -}}
{{- end -}}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $tolerations := .own.tolerations | default $global.tolerations | default list -}}
{{- $lost := include "socialnetwork.nodeLostSeconds" .root -}}
{{- if ne $lost "" -}}
{{- $own := list -}}
{{- range $tolerations }}{{ $own = append $own (.key | default "") }}{{ end -}}
{{- range $taint := list "node.kubernetes.io/not-ready" "node.kubernetes.io/unreachable" -}}
{{- if not (has $taint $own) -}}
{{- $tolerations = append $tolerations (dict "key" $taint "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" (int64 $lost)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $spread := $global.spread | default dict -}}
{{- if and .name (gt (int ($spread.maxSkew | default 0)) 0) }}
{{- if not (has $spread.whenUnsatisfiable (list "ScheduleAnyway" "DoNotSchedule")) -}}
{{- fail (printf "scheduling.spread.whenUnsatisfiable: %q is not ScheduleAnyway or DoNotSchedule" (toString $spread.whenUnsatisfiable)) -}}
{{- end }}
# The stack's pods (services, stores, nginx) spread over the nodes they may run on.
topologySpreadConstraints:
  - maxSkew: {{ int $spread.maxSkew }}
    topologyKey: {{ $spread.topologyKey | default "kubernetes.io/hostname" }}
    whenUnsatisfiable: {{ $spread.whenUnsatisfiable }}
    nodeTaintsPolicy: Honor
    labelSelector:
      matchLabels:
        app.kubernetes.io/instance: {{ .root.Release.Name }}
        app.kubernetes.io/part-of: socialnetwork
      matchExpressions:
        - {key: app.kubernetes.io/component, operator: In, values: [service, store, gateway]}
{{- end }}
{{- end }}

{{/* scheduling.replicaAntiAffinity, checked: preferred, required or none. */}}
{{- define "socialnetwork.replicaAntiAffinity" -}}
{{- $anti := .Values.scheduling.replicaAntiAffinity | default "none" | toString -}}
{{- if not (has $anti (list "preferred" "required" "none")) -}}
{{- fail (printf "scheduling.replicaAntiAffinity: %q is not one of preferred, required, none" $anti) -}}
{{- end -}}
{{- $anti -}}
{{- end }}

{{/* scheduling.nodeLostSeconds, checked: a whole number of seconds, or empty (null). */}}
{{- define "socialnetwork.nodeLostSeconds" -}}
{{- $lost := .Values.scheduling.nodeLostSeconds -}}
{{- if not (kindIs "invalid" $lost) -}}
{{- if or (not (regexMatch "^[0-9]+$" (toString $lost))) (kindIs "string" $lost) -}}
{{- fail (printf "scheduling.nodeLostSeconds: %q is not a whole number of seconds (or null: Kubernetes' default, 300)" (toString $lost)) -}}
{{- end -}}
{{- int64 $lost -}}
{{- end -}}
{{- end }}

{{/*
A PodDisruptionBudget of one component of the stack (podDisruptionBudget.enabled): at most
podDisruptionBudget.maxUnavailable of its pods evicted at a time by a drain. Call with
(dict "root" $ "name" NAME "component" KIND).
*/}}
{{- define "socialnetwork.pdb" -}}
{{- $pdb := .root.Values.podDisruptionBudget -}}
{{- if $pdb.enabled }}
{{- if lt (int $pdb.maxUnavailable) 1 -}}
{{- fail "podDisruptionBudget.maxUnavailable must be 1 or more (0 would block every drain)" -}}
{{- end }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels:
    {{- include "socialnetwork.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ int $pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "socialnetwork.selector" . | nindent 6 }}
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

{{/* A pod's time from its deletion to its kill: the drain, then as long as the services
let requests in flight finish (the server's shutdown_timeout_s, 30 s). Kubernetes' default,
30 s, would cut a drain of 30 s or more short. */}}
{{- define "socialnetwork.grace" -}}
terminationGracePeriodSeconds: {{ add (int .Values.drainSeconds) 30 }}
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

{{/* nginx.conf: files/nginx.conf (generated) with gateway.workerProcesses, checked. */}}
{{- define "socialnetwork.nginxConf" -}}
{{- $workers := .Values.gateway.workerProcesses -}}
{{- $workers = ternary "auto" (toString $workers) (kindIs "invalid" $workers) -}}
{{- if not (regexMatch "^(auto|[1-9][0-9]*)$" $workers) -}}
{{- fail (printf "gateway.workerProcesses: %q is not auto or a count of 1 or more" $workers) -}}
{{- end -}}
{{- regexReplaceAll "(?m)^worker_processes [^;]*;" (.Files.Get "files/nginx.conf") (printf "worker_processes %s;" $workers) -}}
{{- end }}
