#!/usr/bin/env bash
# check-no-leftovers.sh fails when an etcd, kube-apiserver or other component
# started from the cached Kubernetes binaries (KUBEBUILDER_ASSETS), or a
# cert-manager controller or cainjector started from CERT_MANAGER_ASSETS (when
# set), is still running: tests must stop every process they start.
set -euo pipefail
dirs=("${KUBEBUILDER_ASSETS:?KUBEBUILDER_ASSETS is not set}")
if [[ -n ${CERT_MANAGER_ASSETS:-} ]]; then
	dirs+=("$CERT_MANAGER_ASSETS")
fi
left=""
for dir in "${dirs[@]}"; do
	found=$(ps -eo pid=,args= | awk -v d="$dir/" 'index($2, d) == 1 { print }' || true)
	if [[ -n "$found" ]]; then
		left+="$found"$'\n'
	fi
done
if [[ -n "$left" ]]; then
	echo "processes left running by the tests:" >&2
	printf '%s' "$left" >&2
	exit 1
fi
echo "no test process left running"
