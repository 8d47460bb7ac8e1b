#!/usr/bin/env bash
# check-no-leftovers.sh fails when an etcd, kube-apiserver or other component
# started from the cached Kubernetes binaries is still running: tests must stop
# every process they start.
set -euo pipefail
dir=${KUBEBUILDER_ASSETS:?KUBEBUILDER_ASSETS is not set}
left=$(ps -eo pid=,args= | awk -v d="$dir/" 'index($2, d) == 1 { print }' || true)
if [[ -n "$left" ]]; then
	echo "processes left running by the tests:" >&2
	echo "$left" >&2
	exit 1
fi
echo "no test process left running"
