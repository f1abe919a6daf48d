{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "the-loop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; "-redis" and "-worker" suffixes must still fit in 63. */}}
{{- define "the-loop.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "the-loop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels shared by every object. */}}
{{- define "the-loop.labels" -}}
helm.sh/chart: {{ include "the-loop.chart" . }}
app.kubernetes.io/name: {{ include "the-loop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels; pass (dict "ctx" $ "component" "web"). */}}
{{- define "the-loop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "the-loop.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "the-loop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "the-loop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "the-loop.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* "true" when the chart runs its own Redis (no external URL, no Sentinel set). */}}
{{- define "the-loop.builtinRedis" -}}
{{- if and (not .Values.redis.url) (not .Values.redis.urlSecretKey) (not .Values.redis.sentinel.hosts) }}true{{ end }}
{{- end }}

{{- define "the-loop.redisName" -}}
{{- printf "%s-redis" (include "the-loop.fullname" .) }}
{{- end }}

{{/* The REDIS_URL environment entry, for the web and the worker alike, and with
     redis.sentinel.hosts the Sentinels' (REDIS_URL then gives only the primary's password,
     database and TLS: its host is ignored). */}}
{{- define "the-loop.redisEnv" -}}
- name: REDIS_URL
{{- if .Values.redis.urlSecretKey }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secret.name }}
      key: {{ .Values.redis.urlSecretKey }}
{{- else if .Values.redis.url }}
  value: {{ .Values.redis.url | quote }}
{{- else if .Values.redis.sentinel.hosts }}
  value: "redis://sentinel-managed/0"
{{- else }}
  value: {{ printf "redis://%s:6379/0" (include "the-loop.redisName" .) | quote }}
{{- end }}
{{- with .Values.redis.sentinel }}
{{- if .hosts }}
{{- if not .masterName }}
{{- fail "redis.sentinel.hosts is set but redis.sentinel.masterName is not: set it to the name the Sentinels monitor the primary under (e.g. mymaster)" }}
{{- end }}
- name: THE_LOOP_REDIS_SENTINELS
  value: {{ join "," .hosts | quote }}
- name: THE_LOOP_REDIS_SENTINEL_MASTER
  value: {{ .masterName | quote }}
{{- if .passwordSecretKey }}
- name: THE_LOOP_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.secret.name }}
      key: {{ .passwordSecretKey }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* One secretKeyRef environment entry: (dict "name" VAR "secret" NAME "key" KEY "optional" BOOL). */}}
{{- define "the-loop.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
      optional: {{ .optional }}
{{- end }}

{{/* Environment shared by web and worker: config file, Redis, plain variables.
     Pass (dict "ctx" $ "env" .Values.web.env); the component's env wins over .Values.env. */}}
{{- define "the-loop.commonEnv" -}}
- name: THE_LOOP_CONFIG
  value: /etc/the-loop/cli-config.yaml
{{ include "the-loop.redisEnv" .ctx }}
{{- range $name, $value := merge (dict) (.env | default dict) (.ctx.Values.env | default dict) }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}

{{/* Volumes shared by web and worker: the config file and a writable /tmp. */}}
{{- define "the-loop.volumes" -}}
- name: config
  configMap:
    name: {{ include "the-loop.fullname" . }}-config
- name: tmp
  emptyDir:
    sizeLimit: 256Mi
{{- end }}

{{- define "the-loop.volumeMounts" -}}
- name: config
  mountPath: /etc/the-loop
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end }}

{{/* Prometheus scrape annotations for a pod serving GET /metrics on the given port. */}}
{{- define "the-loop.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ . | quote }}
prometheus.io/path: /metrics
{{- end }}

{{/* Pod template annotations: roll the pods when cli-config.yaml changes. */}}
{{- define "the-loop.podAnnotations" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end }}

{{/* -- the runner ------------------------------------------------------------------ */}}

{{- define "the-loop.runnerName" -}}
{{- printf "%s-runner" (include "the-loop.fullname" .) }}
{{- end }}

{{- define "the-loop.runnerImage" -}}
{{- $image := .Values.runner.image }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}

{{/* The harness CLI versions the runner image pins (Dockerfile CLAUDE_CODE_VERSION,
     CODEX_VERSION); tests/deploy/test_chart_runner.py keeps the two in step. */}}
{{- define "the-loop.imageHarnessVersions" -}}
claude-code: "2.1.332"
codex: "0.171.0"
{{- end }}

{{/* harness.version for cli-config.yaml: runner.harness.version, else the image's pin for
     the adapter unless config.harness.version is set; empty: nothing to add. */}}
{{- define "the-loop.harnessVersion" -}}
{{- $harness := .Values.runner.harness }}
{{- $fromConfig := (get (.Values.config | default dict) "harness") | default dict }}
{{- if and .Values.runner.enabled (ne $harness.adapter "none") }}
{{- if $harness.version }}
{{- $harness.version }}
{{- else if not (hasKey $fromConfig "version") }}
{{- get (include "the-loop.imageHarnessVersions" . | fromYaml) $harness.adapter }}
{{- end }}
{{- end }}
{{- end }}

{{/* The content of cli-config.yaml: config, with harness.version from the runner values. */}}
{{- define "the-loop.cliConfig" -}}
{{- $config := deepCopy (.Values.config | default dict) }}
{{- $version := include "the-loop.harnessVersion" . }}
{{- if $version }}
{{- $harness := deepCopy ((get $config "harness") | default dict) }}
{{- $_ := set $harness "version" $version }}
{{- $_ := set $config "harness" $harness }}
{{- if not (hasKey $config "version") }}
{{- /* cli-config.yaml's schema version (foundation.config CURRENT_VERSION). */}}
{{- $_ := set $config "version" 2 }}
{{- end }}
{{- end }}
{{- if $config }}{{ toYaml $config }}{{ end }}
{{- end }}

{{/* The variables the harness's API key is passed as, comma-separated; empty for none
     (and for a command adapter that names none). Codex gets both OPENAI_API_KEY and
     CODEX_API_KEY: `codex exec` authenticates with CODEX_API_KEY, OPENAI_API_KEY alone
     sends no Authorization header (Codex 0.171). */}}
{{- define "the-loop.harnessKeyEnv" -}}
{{- $harness := .Values.runner.harness }}
{{- if ne $harness.adapter "none" }}
{{- if $harness.apiKey.env }}
{{- $harness.apiKey.env }}
{{- else if eq $harness.adapter "claude-code" }}ANTHROPIC_API_KEY
{{- else if eq $harness.adapter "codex" }}OPENAI_API_KEY,CODEX_API_KEY
{{- end }}
{{- end }}
{{- end }}

{{/* THE_LOOP_HARNESS for the processes that queue turns (worker) and run them (runner). */}}
{{- define "the-loop.harnessAdapterEnv" -}}
{{- if .Values.runner.enabled }}
- name: THE_LOOP_HARNESS
  value: {{ .Values.runner.harness.adapter | quote }}
{{- end }}
{{- end }}

{{/* "true" when the runner's workspace volume is a PersistentVolumeClaim that one pod at a
     time can mount (so a rollout must stop the old pod first). */}}
{{- define "the-loop.runnerSingleAttach" -}}
{{- $persistence := .Values.runner.workspace.persistence }}
{{- if and $persistence.enabled (not (has "ReadWriteMany" $persistence.accessModes)) }}true{{ end }}
{{- end }}
