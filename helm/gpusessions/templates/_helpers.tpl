{{/* Labels on every object of this chart. */}}
{{- define "gpusessions.labels" -}}
app.kubernetes.io/name: gpusessions
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: gpusessions
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* A CEL string literal: single quotes, backslash and quote escaped. */}}
{{- define "gpusessions.celLiteral" -}}
{{- if kindIs "bool" . -}}
{{- ternary "true" "false" . -}}
{{- else if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- printf "'%s'" (. | toString | replace "\\" "\\\\" | replace "'" "\\'") -}}
{{- end -}}
{{- end -}}

{{/*
The CEL selector of a size's `match`: the driver, attributes equal to values,
capacities at least quantities. The same form (and order: keys sorted) as
gpusessions.core.sizes.DeviceMatch.cel() in Python, which the picker reads back;
tests/unit/test_chart.py checks that both give the same text.
*/}}
{{- define "gpusessions.cel" -}}
{{- $driver := .driver | default "gpu.nvidia.com" -}}
{{- $d := include "gpusessions.celLiteral" $driver -}}
{{- $parts := list (printf "device.driver == %s" $d) -}}
{{- range $k, $v := (.attributes | default dict) -}}
{{- $parts = append $parts (printf "device.attributes[%s].%s == %s" $d $k (include "gpusessions.celLiteral" $v)) -}}
{{- end -}}
{{- range $k, $v := (.capacity | default dict) -}}
{{- $parts = append $parts (printf "device.capacity[%s].%s.compareTo(quantity(%s)) >= 0" $d $k (include "gpusessions.celLiteral" (toString $v))) -}}
{{- end -}}
{{- join " && " $parts -}}
{{- end -}}

{{- define "gpusessions.deviceClassName" -}}
{{- printf "%s%s" .prefix .name -}}
{{- end -}}

{{/* Names of cluster-scoped RBAC objects: unique per release namespace. */}}
{{- define "gpusessions.clusterName" -}}
{{- printf "gpusessions-%s-%s" .root.Release.Namespace .name -}}
{{- end -}}

{{- define "gpusessions.kernelsOn" -}}
{{- $on := .Values.holder.persistKernels -}}
{{- range .Values.sizes -}}{{- if and (hasKey . "persistKernels") .persistKernels -}}{{- $on = true -}}{{- end -}}{{- end -}}
{{- ternary "true" "" $on -}}
{{- end -}}

{{/*
Egress rules of the pods that run user code (a JSON list), from networkPolicy.egressAllowRules
and networkPolicy.egress with the meaning z2jh gives the same keys of its
singleuser.networkPolicy: DNS (port 53, UDP and TCP) to the metadata server, kube-system and the
private ranges; the internet but the private ranges and the metadata server; the private
ranges; the metadata server; then the extra rules as given.
*/}}
{{- define "gpusessions.userCodeEgress" -}}
{{- $np := .Values.networkPolicy }}
{{- $allow := $np.egressAllowRules }}
{{- $metadata := printf "%s/32" $np.cloudMetadataIp }}
{{- $private := list "10.0.0.0/8" "172.16.0.0/12" "192.168.0.0/16" }}
{{- $privatePeers := list }}
{{- range $private }}{{ $privatePeers = append $privatePeers (dict "ipBlock" (dict "cidr" .)) }}{{ end }}
{{- $rules := list }}
{{- $dns := list }}
{{- if $allow.dnsPortsCloudMetadataServer }}{{ $dns = append $dns (dict "ipBlock" (dict "cidr" $metadata)) }}{{ end }}
{{- if $allow.dnsPortsKubeSystemNamespace }}{{ $dns = append $dns (dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" "kube-system"))) }}{{ end }}
{{- if $allow.dnsPortsPrivateIPs }}{{ $dns = concat $dns $privatePeers }}{{ end }}
{{- if $dns }}
{{- $rules = append $rules (dict "ports" (list (dict "port" 53 "protocol" "UDP") (dict "port" 53 "protocol" "TCP")) "to" $dns) }}
{{- end }}
{{- if $allow.nonPrivateIPs }}
{{- $rules = append $rules (dict "to" (list (dict "ipBlock" (dict "cidr" "0.0.0.0/0" "except" (append $private $metadata))))) }}
{{- end }}
{{- if $allow.privateIPs }}{{ $rules = append $rules (dict "to" $privatePeers) }}{{ end }}
{{- if $allow.cloudMetadataServer }}{{ $rules = append $rules (dict "to" (list (dict "ipBlock" (dict "cidr" $metadata)))) }}{{ end }}
{{- concat $rules $np.egress | toJson -}}
{{- end -}}
