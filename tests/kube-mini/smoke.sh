#!/usr/bin/env bash
# Checks, with curl and jq only, what khagent expects of a real API server
# started by `scripts/kube-mini.sh start DIR`:
#   nodes     the admin creates node-a and node-b and JSON-patches an extended
#             resource (kubernetes.io/batch-cpu) into node-a's capacity and
#             allocatable, through nodes/status
#   tokens    manifests/namespace.yaml and rbac.yaml, applied as they are; a
#             token requested for the khagent ServiceAccount, bound to a pod
#             on node-a, authenticates with the node's name in its user extra
#             (SelfSubjectReview)
#   policy    manifests/node-status-policy.yaml, applied as it is: that token
#             may patch node-a's status and is denied node-b's
#
#   tests/kube-mini/smoke.sh DIR
#
# Meant for a fresh server (objects left by an earlier run are reused).
# Prints one line a check and "N passed, N failed" at the end; exits non-zero
# when a check failed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
(($# == 1)) || { echo "usage: tests/kube-mini/smoke.sh DIR" >&2; exit 2; }
[[ -f "$1/env" ]] || { echo "smoke: no $1/env: run scripts/kube-mini.sh start $1 first" >&2; exit 2; }
# shellcheck disable=SC1091
. "$1/env"
policy_file="$root/manifests/node-status-policy.yaml"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

pass() { passed=$((passed + 1)); echo "ok:   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
die() { echo "smoke: $*" >&2; echo "$passed passed, $((failed + 1)) failed"; exit 1; }
note() { echo "      $*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# api WHO METHOD PATH [BODY [CONTENT-TYPE]]: WHO is admin or a bearer token.
# Sets $code to the HTTP status and $body to the response.
api() {
  local who=$1 method=$2 path=$3 data=${4-} ctype=${5:-application/json}
  local args=(-sS --max-time 15 --cacert "$KUBE_CA" -X "$method" -o "$tmp/body" -w '%{http_code}')
  if [[ "$who" == admin ]]; then
    args+=(--cert "$KUBE_ADMIN_CERT" --key "$KUBE_ADMIN_KEY")
  else
    args+=(-H "Authorization: Bearer $who")
  fi
  [[ -z "$data" ]] || args+=(-H "Content-Type: $ctype" --data-binary "$data")
  code="$(curl "${args[@]}" "$KUBE_URL$path")" || die "curl $method $path failed"
  body="$(<"$tmp/body")"
}

# create PATH BODY NAME [CONTENT-TYPE]: creates, or accepts that it exists.
create() {
  api admin POST "$1" "$2" "${4:-application/json}"
  case "$code" in
    201) pass "created $3" ;;
    409) pass "$3 exists already" ;;
    *) die "creating $3: HTTP $code: $body" ;;
  esac
}

# The documents of a manifest file, one "FILE KIND NAME COLLECTION-PATH" a
# line (FILE: the document alone, in $tmp), for apply and delete. The API
# server takes YAML as it is: no converter needed.
manifest_docs() {
  local file=$1 dir doc kind name ns path
  dir="$(mktemp -d "$tmp/docs.XXXXXX")"
  awk -v dir="$dir" '/^---$/ {n++; next} {print > (dir "/" n + 0 ".yaml")}' "$file"
  while IFS= read -r doc; do
    grep -q '^kind:' "$doc" || continue
    kind="$(awk '$1 == "kind:" {print $2; exit}' "$doc")"
    name="$(awk '/^metadata:/ {m = 1; next} /^[^ ]/ {m = 0} m && $1 == "name:" {print $2; exit}' "$doc")"
    ns="$(awk '/^metadata:/ {m = 1; next} /^[^ ]/ {m = 0} m && $1 == "namespace:" {print $2; exit}' "$doc")"
    case "$kind" in
      Namespace) path=/api/v1/namespaces ;;
      ServiceAccount) path="/api/v1/namespaces/$ns/serviceaccounts" ;;
      ClusterRole | ClusterRoleBinding) path="/apis/rbac.authorization.k8s.io/v1/${kind,,}s" ;;
      ValidatingAdmissionPolicy) path=/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies ;;
      ValidatingAdmissionPolicyBinding) path=/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings ;;
      *) die "$file: kind $kind not handled here" ;;
    esac
    echo "$doc $kind $name $path"
  done < <(find "$dir" -name '*.yaml' | sort -V)
}

# apply FILE: creates every document of FILE (or accepts that it exists).
apply() {
  local doc kind name path
  while read -r doc kind name path; do
    create "$path" "$(<"$doc")" "$kind $name (manifests/${1##*/})" application/yaml
  done < <(manifest_docs "$1")
}

api admin GET /version
[[ "$code" == 200 ]] || die "GET /version: HTTP $code: $body"
echo "== nodes ($KUBE_URL, kube-apiserver $(jq -r .gitVersion <<<"$body"))"
for n in node-a node-b; do
  create /api/v1/nodes "$(jq -nc --arg n "$n" '{apiVersion: "v1", kind: "Node", metadata: {name: $n}}')" "node $n"
done

batch_patch='[
  {"op": "add", "path": "/status/capacity/kubernetes.io~1batch-cpu", "value": "1500"},
  {"op": "add", "path": "/status/allocatable/kubernetes.io~1batch-cpu", "value": "1500"}]'

# A node no kubelet ever reported for has no status.capacity: a JSON patch
# "add" needs the parent map to exist.
api admin GET /api/v1/nodes/node-a
note "fresh node-a: status = $(jq -c .status <<<"$body")"
api admin PATCH /api/v1/nodes/node-a/status "$batch_patch" application/json-patch+json
if [[ "$code" == 200 ]]; then
  note "JSON patch add under a missing status.capacity: HTTP 200 (the parent was created)"
else
  note "JSON patch add under a missing status.capacity: HTTP $code $(jq -r .reason <<<"$body"): $(jq -r '([.details.causes[]?.message] | join("; ")) as $c | if $c == "" then .message else $c end' <<<"$body")"
  note "(a merge patch, or a kubelet having reported a capacity first, avoids that)"
fi

# What a kubelet reports, as a merge patch (which creates maps as needed).
for n in node-a node-b; do
  api admin PATCH "/api/v1/nodes/$n/status" \
    '{"status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                 "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}' \
    application/merge-patch+json
  [[ "$code" == 200 ]] || die "kubelet-like status of $n: HTTP $code: $body"
done
pass "node-a and node-b have a kubelet-like capacity and allocatable (merge patch)"

api admin PATCH /api/v1/nodes/node-a/status "$batch_patch" application/json-patch+json
if [[ "$code" == 200 ]] &&
  [[ "$(jq -r '.status.capacity["kubernetes.io/batch-cpu"] + "/" + .status.allocatable["kubernetes.io/batch-cpu"]' <<<"$body")" == 1500/1500 ]]; then
  pass "admin JSON-patched kubernetes.io/batch-cpu=1500 into node-a's capacity and allocatable"
else
  fail "admin JSON patch of node-a's status: HTTP $code: $body"
fi
api admin GET /api/v1/nodes/node-a
note "node-a: capacity = $(jq -c .status.capacity <<<"$body")"

echo "== tokens"
# The agent's own namespace, ServiceAccount and RBAC, as shipped.
apply "$root/manifests/namespace.yaml"
apply "$root/manifests/rbac.yaml"
# No kubelet: the pod stays Pending, which is all a bound token needs.
create /api/v1/namespaces/khagent/pods \
  '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "khagent-node-a", "namespace": "khagent"},
    "spec": {"nodeName": "node-a", "serviceAccountName": "khagent",
             "containers": [{"name": "khagent", "image": "khagent:smoke"}]}}' \
  "pod khagent/khagent-node-a on node-a"
api admin GET /api/v1/namespaces/khagent/pods/khagent-node-a
pod_uid="$(jq -r .metadata.uid <<<"$body")"
note "pod phase: $(jq -r .status.phase <<<"$body")"

api admin POST /api/v1/namespaces/khagent/serviceaccounts/khagent/token "$(jq -nc --arg uid "$pod_uid" '{
  apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest",
  spec: {expirationSeconds: 3600,
         boundObjectRef: {apiVersion: "v1", kind: "Pod", name: "khagent-node-a", uid: $uid}}}')"
token="$(jq -r '.status.token // empty' <<<"$body")"
if [[ "$code" == 201 && -n "$token" ]]; then
  pass "TokenRequest bound to pod khagent-node-a gave a token (expires $(jq -r .status.expirationTimestamp <<<"$body"))"
else
  die "TokenRequest: HTTP $code: $body"
fi
# The JWT's own claims (the payload is base64url without padding).
payload="$(cut -d. -f2 <<<"$token" | tr '_-' '/+')"
while ((${#payload} % 4)); do payload+="="; done
note "token claims: $(base64 -d <<<"$payload" | jq -c '{aud, iss, sub, "kubernetes.io": .["kubernetes.io"]}')"

api "$token" POST /apis/authentication.k8s.io/v1/selfsubjectreviews \
  '{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}'
[[ "$code" == 201 ]] || die "SelfSubjectReview: HTTP $code: $body"
note "SelfSubjectReview: user $(jq -r .status.userInfo.username <<<"$body")"
while IFS= read -r line; do note "  extra $line"; done < <(jq -r '.status.userInfo.extra | to_entries[] | "\(.key) = \(.value | join(","))"' <<<"$body")
node_extra="$(jq -r '.status.userInfo.extra["authentication.kubernetes.io/node-name"] // [] | join(",")' <<<"$body")"
if [[ "$node_extra" == node-a ]]; then
  pass "the token's user extra authentication.kubernetes.io/node-name is node-a"
else
  fail "the token's user extra authentication.kubernetes.io/node-name is '$node_extra', not node-a"
fi

echo "== policy (manifests/${policy_file##*/})"
sa_patch='[{"op": "add", "path": "/status/capacity/kubernetes.io~1batch-cpu", "value": "1000"},
  {"op": "add", "path": "/status/allocatable/kubernetes.io~1batch-cpu", "value": "1000"}]'
mapfile -t docs < <(manifest_docs "$policy_file")
# Left by an earlier run: removed, bindings first.
for ((i = ${#docs[@]} - 1; i >= 0; i--)); do
  read -r doc kind name path <<<"${docs[i]}"
  api admin DELETE "$path/$name"
  [[ "$code" == 200 || "$code" == 404 ]] || die "deleting $kind $name: HTTP $code: $body"
done

# dry_run_node_b CODE: polls (30 s at most) a dry-run patch of node-b's
# status by the token until it gets HTTP CODE; sets $tries.
dry_run_node_b() {
  local deadline=$(($(now_ms) + 30000))
  tries=0
  while :; do
    tries=$((tries + 1))
    api "$token" PATCH "/api/v1/nodes/node-b/status?dryRun=All" "$sa_patch" application/json-patch+json
    [[ "$code" != "$1" ]] || return 0
    (($(now_ms) < deadline)) || return 1
    sleep 0.1
  done
}

# Without the policy, RBAC alone lets the agent's token patch any node.
if dry_run_node_b 200; then
  pass "without the policy the token may patch node-b's status (RBAC covers every node; dry run)"
else
  fail "without the policy the token's dry-run patch of node-b: HTTP $code: $body"
fi

for entry in "${docs[@]}"; do
  read -r doc kind name path <<<"$entry"
  [[ "$kind" == ValidatingAdmissionPolicyBinding ]] && bound_ms=$(now_ms)
  create "$path" "$(<"$doc")" "$kind $name" application/yaml
done

# Bindings are picked up asynchronously: poll with dry runs until denied.
dry_run_node_b 403 || true
effect_ms=$(($(now_ms) - bound_ms))
if [[ "$code" == 403 ]]; then
  pass "the policy took effect $effect_ms ms after the binding was created ($tries tries)"
else
  fail "after $effect_ms ms the token's dry-run patch of node-b still gives HTTP $code: $body"
fi

api "$token" PATCH /api/v1/nodes/node-a/status "$sa_patch" application/json-patch+json
# Quantities come back in canonical form: "1000" is stored as "1k" (while
# "1500" stays "1500"), so compare parsed values, not strings.
if [[ "$code" == 200 && "$(jq -r '.status.capacity["kubernetes.io/batch-cpu"]' <<<"$body")" == 1k ]]; then
  pass "the token patched node-a's status (kubernetes.io/batch-cpu \"1000\", read back as \"1k\")"
else
  fail "the token's patch of node-a's status: HTTP $code: $body"
fi

api admin GET /api/v1/nodes/node-b
rv_before="$(jq -r .metadata.resourceVersion <<<"$body")"
api "$token" PATCH /api/v1/nodes/node-b/status "$sa_patch" application/json-patch+json
if [[ "$code" == 403 ]] && jq -e '.reason == "Forbidden" and (.message | contains("may not write the status of node node-b"))' <<<"$body" >/dev/null; then
  pass "the token was denied node-b's status: HTTP 403"
  note "message: $(jq -r .message <<<"$body")"
else
  fail "the token's patch of node-b's status: HTTP $code: $body"
fi
api admin GET /api/v1/nodes/node-b
if [[ "$(jq -r .metadata.resourceVersion <<<"$body")" == "$rv_before" ]]; then
  pass "node-b is unchanged (resourceVersion $rv_before)"
else
  fail "node-b changed: resourceVersion $rv_before -> $(jq -r .metadata.resourceVersion <<<"$body"): $(jq -c .status.capacity <<<"$body")"
fi

api admin PATCH /api/v1/nodes/node-b/status "$batch_patch" application/json-patch+json
if [[ "$code" == 200 ]]; then
  pass "the policy leaves other users alone: the admin patched node-b's status"
else
  fail "the admin's patch of node-b's status: HTTP $code: $body"
fi

echo "$passed passed, $failed failed"
((failed == 0))
