{{/*
Expand the name of the chart.
*/}}
{{- define "olu-worker.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "olu-worker.fullname" -}}
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

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "olu-worker.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "olu-worker.labels" -}}
helm.sh/chart: {{ include "olu-worker.chart" . }}
{{ include "olu-worker.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: worker
{{- end }}

{{/*
Selector labels
*/}}
{{- define "olu-worker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "olu-worker.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "olu-worker.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "olu-worker.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The container image reference (tag defaults to the chart appVersion).
*/}}
{{- define "olu-worker.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/*
A value as the worker's parsers expect it in an environment variable.
Helm reads every YAML number as a float64, and toString would print 1048576 as "1.048576e+06",
which the worker's integer settings refuse: whole numbers are printed as integers. Lists (input
topics) are joined with commas; booleans print as true/false.
*/}}
{{- define "olu-worker.envValue" -}}
{{- if kindIs "float64" . -}}
{{- if and (eq . (floor .)) (lt . 1e15) (gt . -1e15) -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- else if kindIs "slice" . -}}
{{- join "," . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end }}

{{/*
Environment variable of a worker setting (worker/config/options.py OPTIONS): OLU_<NAME>, except the
bootstrap servers, which are OLU_KAFKA_BOOTSTRAP_SERVERS.
*/}}
{{- define "olu-worker.settingEnv" -}}
{{- if eq . "bootstrap_servers" -}}
OLU_KAFKA_BOOTSTRAP_SERVERS
{{- else -}}
{{- printf "OLU_%s" (upper .) -}}
{{- end -}}
{{- end }}

{{/*
Environment variable of a librdkafka pass-through key: OLU_KAFKA_<KEY>, "_" as "__", "." as "_".
*/}}
{{- define "olu-worker.kafkaEnv" -}}
{{- printf "OLU_KAFKA_%s" (. | replace "_" "__" | replace "." "_" | upper) -}}
{{- end }}

{{/*
Whether a value is set (not null, not an empty string).
*/}}
{{- define "olu-worker.isSet" -}}
{{- if not (or (kindIs "invalid" .) (and (kindIs "string" .) (eq . ""))) -}}true{{- end -}}
{{- end }}

{{/*
The worker's revoke budget in seconds: revoke_budget_fraction x max.poll.interval.ms
(worker/config/settings.py Settings.revoke_budget_seconds; defaults 0.5 x 300000 ms = 150 s).
*/}}
{{- define "olu-worker.revokeBudgetSeconds" -}}
{{- $fraction := .Values.config.revoke_budget_fraction | default 0.5 -}}
{{- $maxPoll := index .Values.kafka "max.poll.interval.ms" | default 300000 -}}
{{- mulf $fraction (divf $maxPoll 1000) -}}
{{- end }}

{{/*
Seconds a SIGTERM'd worker may need (worker/stream/app.py _shutdown): the revoke budget for final
snapshots and commits, then producer.flush(10), plus commit_transaction(30) in transactional mode,
plus 5 s for consumer.close() and process exit.
*/}}
{{- define "olu-worker.shutdownSeconds" -}}
{{- $seconds := addf (include "olu-worker.revokeBudgetSeconds" .) 20 -}}
{{- if .Values.config.transactional -}}
{{- $seconds = addf $seconds 30 -}}
{{- end -}}
{{- $seconds -}}
{{- end }}

{{/*
Checks that values.schema.json cannot express (each fails the install with a message).
*/}}
{{- define "olu-worker.validate" -}}
{{- $c := .Values.config -}}
{{- if not (include "olu-worker.isSet" $c.bootstrap_servers) -}}
{{- fail "config.bootstrap_servers is required (OLU_KAFKA_BOOTSTRAP_SERVERS: the Kafka bootstrap servers, host:port[,host:port])" -}}
{{- end -}}
{{- if not (or (include "olu-worker.isSet" $c.dim) (include "olu-worker.isSet" $c.features_file) .Values.featureSpec) -}}
{{- fail "config.dim is required (OLU_DIM: the feature dimension of the input events), unless a feature spec (featureSpec or config.features_file) gives it" -}}
{{- end -}}
{{- if and .Values.featureSpec (include "olu-worker.isSet" $c.features_file) -}}
{{- fail "featureSpec and config.features_file exclude each other: featureSpec mounts the spec and sets OLU_FEATURES_FILE itself" -}}
{{- end -}}
{{- if not (include "olu-worker.isSet" $c.privacy_unit) -}}
{{- fail "config.privacy_unit is required (OLU_PRIVACY_UNIT): per-request protects each deletion request on its own, all-deletions every deleted record together at a far larger noise; olu-worker plan shows what each costs on your events" -}}
{{- end -}}
{{- if not (include "olu-worker.isSet" $c.state_url) -}}
{{- fail "config.state_url is required: an s3://bucket[/path] URL (OLU_STATE_URL). Pods are interchangeable and the deletion counter must survive restarts, so state lives in object storage" -}}
{{- end -}}
{{- if include "olu-worker.isSet" $c.transactional_id -}}
{{- fail "config.transactional_id cannot be set in this chart: every replica of the Deployment would share it and fence the others. Leave it unset; the worker derives {group_id}-{pod name}" -}}
{{- end -}}
{{- $grace := float64 .Values.terminationGracePeriodSeconds -}}
{{- $need := float64 (include "olu-worker.shutdownSeconds" .) -}}
{{- if le $grace $need -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed the worker's shutdown time, %v s: revoke budget %v s (config.revoke_budget_fraction x kafka.max.poll.interval.ms) + 5 s offset commit + 5 s consumer close + 10 s producer flush%s. Raise terminationGracePeriodSeconds or lower the budget" .Values.terminationGracePeriodSeconds $need (include "olu-worker.revokeBudgetSeconds" .) (ternary " + 30 s transaction commit" "" (eq (toString $c.transactional) "true"))) -}}
{{- end -}}
{{- if .Values.autoscaling.enabled -}}
{{- if gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas) -}}
{{- fail (printf "autoscaling.minReplicas (%v) must not exceed autoscaling.maxReplicas (%v)" .Values.autoscaling.minReplicas .Values.autoscaling.maxReplicas) -}}
{{- end -}}
{{- end -}}
{{- $pdb := .Values.podDisruptionBudget -}}
{{- if and $pdb.enabled (include "olu-worker.isSet" $pdb.minAvailable) (include "olu-worker.isSet" $pdb.maxUnavailable) -}}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" -}}
{{- end -}}
{{- end }}

{{/*
Whether the Kafka TLS files volume is needed.
*/}}
{{- define "olu-worker.tlsVolume" -}}
{{- $tls := .Values.kafkaAuth.tls -}}
{{- if and $tls.enabled (or $tls.caSecret $tls.clientSecret) -}}true{{- end -}}
{{- end }}

{{/*
The container's environment, generated from values (extraEnv is appended by the Deployment):
  1. NUMBA_CACHE_DIR (numba needs a writable cache; the root filesystem is read-only)
  2. config:       every set worker setting -> OLU_<NAME>
  3. kafkaAuth:    security protocol, SASL mechanism and credentials (secretKeyRef), TLS file paths
  4. kafka:        librdkafka pass-through -> OLU_KAFKA_<KEY>
  5. objectStore:  AWS_* for obstore (credentials from a Secret)
*/}}
{{- define "olu-worker.env" -}}
- name: NUMBA_CACHE_DIR
  value: {{ .Values.numbaCacheDir | quote }}
{{- if .Values.featureSpec }}
- name: OLU_FEATURES_FILE
  value: {{ printf "%s/features.yaml" .Values.featureSpecMountPath | quote }}
{{- end }}
{{- range $name, $value := .Values.config }}
{{- if and (include "olu-worker.isSet" $value) (ne $name "transactional_id") (ne $name "schema_registry_user_info") }}
- name: {{ include "olu-worker.settingEnv" $name }}
{{- if and (eq $name "classes") (kindIs "slice" $value) }}
  {{- /* a JSON list: labels keep their kind (["1","2"] stays strings) and may hold commas */}}
  value: {{ toJson $value | quote }}
{{- else }}
  value: {{ include "olu-worker.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.schemaRegistryAuth }}
{{- if .existingSecret }}
- name: OLU_SCHEMA_REGISTRY_USER_INFO
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret | quote }}
      key: {{ .userInfoKey | quote }}
{{- end }}
{{- end }}
{{- $kafka := .Values.kafka }}
{{- $sasl := .Values.kafkaAuth.sasl }}
{{- $tls := .Values.kafkaAuth.tls }}
{{- if and (or $sasl.enabled $tls.enabled) (not (hasKey $kafka "security.protocol")) }}
- name: OLU_KAFKA_SECURITY_PROTOCOL
  value: {{ ternary (ternary "SASL_SSL" "SASL_PLAINTEXT" $tls.enabled) "SSL" $sasl.enabled | quote }}
{{- end }}
{{- if $sasl.enabled }}
{{- if not (hasKey $kafka "sasl.mechanism") }}
- name: OLU_KAFKA_SASL_MECHANISM
  value: {{ $sasl.mechanism | quote }}
{{- end }}
- name: OLU_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret | quote }}
      key: {{ $sasl.usernameKey | quote }}
- name: OLU_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret | quote }}
      key: {{ $sasl.passwordKey | quote }}
{{- end }}
{{- if $tls.enabled }}
{{- if $tls.caSecret }}
- name: OLU_KAFKA_SSL_CA_LOCATION
  value: {{ printf "%s/ca.crt" $tls.mountPath | quote }}
{{- end }}
{{- if $tls.clientSecret }}
- name: OLU_KAFKA_SSL_CERTIFICATE_LOCATION
  value: {{ printf "%s/client.crt" $tls.mountPath | quote }}
- name: OLU_KAFKA_SSL_KEY_LOCATION
  value: {{ printf "%s/client.key" $tls.mountPath | quote }}
{{- if $tls.keyPasswordKey }}
- name: OLU_KAFKA_SSL_KEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $tls.clientSecret | quote }}
      key: {{ $tls.keyPasswordKey | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key, $value := $kafka }}
{{- if include "olu-worker.isSet" $value }}
- name: {{ include "olu-worker.kafkaEnv" $key }}
  value: {{ include "olu-worker.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- $store := .Values.objectStore }}
{{- if $store.region }}
- name: AWS_REGION
  value: {{ $store.region | quote }}
{{- end }}
{{- if $store.endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ $store.endpoint | quote }}
{{- end }}
{{- if $store.allowHttp }}
- name: AWS_ALLOW_HTTP
  value: "true"
{{- end }}
{{- if $store.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $store.existingSecret | quote }}
      key: {{ $store.accessKeyIdKey | quote }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $store.existingSecret | quote }}
      key: {{ $store.secretAccessKeyKey | quote }}
{{- if $store.sessionTokenKey }}
- name: AWS_SESSION_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $store.existingSecret | quote }}
      key: {{ $store.sessionTokenKey | quote }}
{{- end }}
{{- end }}
{{- end }}
