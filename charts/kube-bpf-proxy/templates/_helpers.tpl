{{/* Names, labels and the decisions several templates share. */}}

{{- define "kube-bpf-proxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kube-bpf-proxy.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "kube-bpf-proxy.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "kube-bpf-proxy.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "kube-bpf-proxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-bpf-proxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kube-bpf-proxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kube-bpf-proxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kube-bpf-proxy
{{- end }}

{{- define "kube-bpf-proxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kube-bpf-proxy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kube-bpf-proxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "kube-bpf-proxy.metricsBindAddress" -}}
{{- $host := .Values.metrics.bindAddress }}
{{- if contains ":" $host }}
{{- printf "[%s]:%d" $host (int .Values.metrics.port) }}
{{- else }}
{{- printf "%s:%d" $host (int .Values.metrics.port) }}
{{- end }}
{{- end }}

{{/*
"true" when some node's kernel (as the API reports it at install/upgrade time) is older than the
version given as "below" (e.g. "5.8"). `helm template` sees no nodes: "false".
*/}}
{{- define "kube-bpf-proxy.nodeKernelBelow" -}}
{{- $below := .below }}
{{- $old := false }}
{{- $nodes := lookup "v1" "Node" "" "" }}
{{- range $node := (get $nodes "items" | default list) }}
{{- $release := regexFind "^[0-9]+\\.[0-9]+" (toString $node.status.nodeInfo.kernelVersion) }}
{{- if and $release (semverCompare (printf "<%s" $below) $release) }}
{{- $old = true }}
{{- end }}
{{- end }}
{{- $old }}
{{- end }}

{{/*
"true" when the agent gets CAP_SYS_ADMIN. Kernels before 5.8 have no CAP_BPF/CAP_PERFMON and let
only CAP_SYS_ADMIN load programs and create maps. "auto" looks at the nodes' kernels through the
API at install/upgrade time; `helm template` sees no nodes, and the project's kernel floor (5.10)
has CAP_BPF, so it then leaves SYS_ADMIN out.
*/}}
{{- define "kube-bpf-proxy.sysAdmin" -}}
{{- $setting := toString .Values.securityContext.sysAdmin }}
{{- if eq $setting "true" }}true
{{- else if eq $setting "false" }}false
{{- else if ne .Values.proxyMode "bpf" }}false
{{- else }}
{{- include "kube-bpf-proxy.nodeKernelBelow" (dict "below" "5.8") }}
{{- end }}
{{- end }}

{{/*
"true" when the agent gets CAP_SYS_RESOURCE. Kernels before 5.11 charge BPF maps to
RLIMIT_MEMLOCK, and libbpf raises that limit (which needs CAP_SYS_RESOURCE) before it creates
maps; from 5.11 maps are charged to the memory cgroup and nothing needs it. "auto" adds it in bpf
mode when some node's kernel is older than 5.11 (seen at install/upgrade time; `helm template`
sees no nodes and leaves it out). The other modes create no BPF maps.
*/}}
{{- define "kube-bpf-proxy.sysResource" -}}
{{- $setting := toString .Values.securityContext.sysResource }}
{{- if eq $setting "true" }}true
{{- else if eq $setting "false" }}false
{{- else if ne .Values.proxyMode "bpf" }}false
{{- else }}
{{- include "kube-bpf-proxy.nodeKernelBelow" (dict "below" "5.11") }}
{{- end }}
{{- end }}

{{/*
The agent's capabilities as a JSON list. BPF and PERFMON load programs and maps (5.8+), NET_ADMIN
attaches them to interfaces and writes iptables/nftables/ipvs, SYS_RESOURCE (old kernels only, see
above) raises RLIMIT_MEMLOCK. Legacy iptables talks to the kernel over a raw socket: NET_RAW.
Each of BPF, PERFMON and NET_ADMIN is shown needed by test/e2e/image.test.ts (docs/install.md).
*/}}
{{- define "kube-bpf-proxy.agentCapabilities" -}}
{{- $caps := list "NET_ADMIN" }}
{{- if eq (include "kube-bpf-proxy.sysResource" .) "true" }}
{{- $caps = append $caps "SYS_RESOURCE" }}
{{- end }}
{{- if eq .Values.proxyMode "bpf" }}
{{- $caps = concat $caps (list "BPF" "PERFMON") }}
{{- end }}
{{- if has .Values.proxyMode (list "iptables" "ipvs") }}
{{- $caps = append $caps "NET_RAW" }}
{{- end }}
{{- if eq (include "kube-bpf-proxy.sysAdmin" .) "true" }}
{{- $caps = append $caps "SYS_ADMIN" }}
{{- end }}
{{- concat $caps .Values.securityContext.extraCapabilities | uniq | sortAlpha | toJson }}
{{- end }}

{{/* The bpf section of config.conf: every value of .Values.bpf that is not null. */}}
{{- define "kube-bpf-proxy.bpfSection" -}}
{{- $section := dict }}
{{- range $key, $value := .Values.bpf }}
{{- if not (kindIs "invalid" $value) }}
{{- $_ := set $section $key $value }}
{{- end }}
{{- end }}
{{- if not $section.mapSizes }}
{{- $_ := unset $section "mapSizes" }}
{{- end }}
{{- /* A bare `off` in a values file is YAML 1.1's false. */}}
{{- range $key := list "xdpMode" "socketLB" }}
{{- if and (hasKey $section $key) (kindIs "bool" (get $section $key)) }}
{{- $_ := set $section $key "off" }}
{{- end }}
{{- end }}
{{- /* The socket hooks attach to the host's cgroup2 root, mounted at this path in the pod (the
container's own /sys/fs/cgroup is its cgroup namespace, a leaf of the node's hierarchy). */}}
{{- if not (hasKey $section "cgroupPath") }}
{{- $_ := set $section "cgroupPath" "/run/kube-bpf-proxy/cgroupv2" }}
{{- end }}
{{- toYaml $section }}
{{- end }}

{{/* The KubeProxyConfiguration built from .Values.config, before the chart's own settings. */}}
{{- define "kube-bpf-proxy.generatedConfig" -}}
{{- $c := .Values.config -}}
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
bindAddress: 0.0.0.0
clientConnection:
  qps: {{ $c.clientConnection.qps }}
  burst: {{ $c.clientConnection.burst }}
clusterCIDR: {{ $c.clusterCIDR | quote }}
configSyncPeriod: {{ $c.configSyncPeriod }}
conntrack:
  maxPerCore: {{ $c.conntrack.maxPerCore }}
  min: {{ $c.conntrack.min }}
  tcpEstablishedTimeout: {{ $c.conntrack.tcpEstablishedTimeout }}
  tcpCloseWaitTimeout: {{ $c.conntrack.tcpCloseWaitTimeout }}
detectLocalMode: {{ $c.detectLocalMode | quote }}
detectLocal:
  bridgeInterface: {{ $c.detectLocal.bridgeInterface | quote }}
  interfaceNamePrefix: {{ $c.detectLocal.interfaceNamePrefix | quote }}
featureGates: {{ $c.featureGates | toJson }}
iptables:
  localhostNodePorts: {{ $c.localhostNodePorts }}
  masqueradeAll: {{ $c.masqueradeAll }}
  masqueradeBit: {{ $c.masqueradeBit }}
  minSyncPeriod: {{ $c.minSyncPeriod }}
  syncPeriod: {{ $c.syncPeriod }}
ipvs:
  excludeCIDRs: {{ $c.ipvs.excludeCIDRs | toJson }}
  minSyncPeriod: {{ $c.minSyncPeriod }}
  scheduler: {{ $c.ipvs.scheduler | quote }}
  strictARP: {{ $c.ipvs.strictARP }}
  syncPeriod: {{ $c.syncPeriod }}
  tcpFinTimeout: {{ $c.ipvs.tcpFinTimeout }}
  tcpTimeout: {{ $c.ipvs.tcpTimeout }}
  udpTimeout: {{ $c.ipvs.udpTimeout }}
nftables:
  masqueradeAll: {{ $c.masqueradeAll }}
  masqueradeBit: {{ $c.masqueradeBit }}
  minSyncPeriod: {{ $c.minSyncPeriod }}
  syncPeriod: {{ $c.syncPeriod }}
nodePortAddresses: {{ $c.nodePortAddresses | toJson }}
{{- end }}

{{/*
config.conf: the pasted or generated KubeProxyConfiguration with the settings the pod depends on
(mode, the healthz and metrics ports the probes and the scrape use, in-cluster credentials) and the
bpf section.
*/}}
{{- define "kube-bpf-proxy.config" -}}
{{- $config := dict }}
{{- $pasted := .Values.config.kubeProxyConfiguration }}
{{- if $pasted }}
{{- $config = fromYaml $pasted }}
{{- if hasKey $config "Error" }}
{{- fail (printf "config.kubeProxyConfiguration is not valid YAML: %s" $config.Error) }}
{{- end }}
{{- if eq (toString $config.kind) "ConfigMap" }}
{{- fail "config.kubeProxyConfiguration holds a whole ConfigMap: paste only its config.conf key (kubectl -n kube-system get cm kube-proxy -o jsonpath='{.data.config\\.conf}')" }}
{{- end }}
{{- if or (ne (toString $config.kind) "KubeProxyConfiguration") (ne (toString $config.apiVersion) "kubeproxy.config.k8s.io/v1alpha1") }}
{{- fail (printf "config.kubeProxyConfiguration must be a KubeProxyConfiguration of apiVersion kubeproxy.config.k8s.io/v1alpha1, not kind %q apiVersion %q" (toString $config.kind) (toString $config.apiVersion)) }}
{{- end }}
{{- else }}
{{- $config = mergeOverwrite (fromYaml (include "kube-bpf-proxy.generatedConfig" .)) (deepCopy .Values.config.extra) }}
{{- end }}
{{- $_ := set $config "mode" .Values.proxyMode }}
{{- $_ := set $config "healthzBindAddress" (printf "0.0.0.0:%d" (int .Values.healthz.port)) }}
{{- $_ := set $config "metricsBindAddress" (include "kube-bpf-proxy.metricsBindAddress" .) }}
{{- $clientConnection := $config.clientConnection | default dict }}
{{- $_ := set $clientConnection "kubeconfig" "" }}
{{- $_ := set $config "clientConnection" $clientConnection }}
{{- if not (hasKey $config "bpf") }}
{{- $_ := set $config "bpf" (fromYaml (include "kube-bpf-proxy.bpfSection" .)) }}
{{- end }}
{{- toYaml $config }}
{{- end }}
