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
