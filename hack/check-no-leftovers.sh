#!/usr/bin/env bash
# check-no-leftovers.sh fails when an etcd, kube-apiserver or other component
# started from the cached Kubernetes binaries (KUBEBUILDER_ASSETS), or a
# cert-manager controller or cainjector started from CERT_MANAGER_ASSETS (when
# set), or a real node's process from DBKEEPER_NODE_TOOLS (when set), or a
# versitygw from DBKEEPER_BACKUP_TOOLS (when set), or a Prometheus that
# devcluster or its test started (internal/test/promrun), is
# still running, or when a real node left its bridge, cgroup, iptables chains,
# state file or a mount under a devcluster run directory, or an instance
# agent's or the backup test left an agent, a sidecar or a server: tests must undo
# everything they start or make.
set -euo pipefail
dirs=("${KUBEBUILDER_ASSETS:?KUBEBUILDER_ASSETS is not set}")
if [[ -n ${CERT_MANAGER_ASSETS:-} ]]; then
	dirs+=("$CERT_MANAGER_ASSETS")
fi
if [[ -n ${DBKEEPER_NODE_TOOLS:-} ]]; then
	dirs+=("$DBKEEPER_NODE_TOOLS")
fi
if [[ -n ${DBKEEPER_BACKUP_TOOLS:-} ]]; then
	dirs+=("$DBKEEPER_BACKUP_TOOLS")
fi
left=""
# The real node's leftovers (internal/test/devcluster/nodehost).
if [[ -e /sys/class/net/dbkeeper0 ]]; then
	left+="the real node's bridge dbkeeper0"$'\n'
fi
if compgen -G '/sys/fs/cgroup/*/dbkeeper-devcluster' >/dev/null; then
	left+="the real node's cgroup dbkeeper-devcluster"$'\n'
fi
if [[ -e /run/dbkeeper-devcluster/state.json ]]; then
	left+="the real node's state file /run/dbkeeper-devcluster/state.json"$'\n'
fi
if command -v iptables >/dev/null && iptables -w 5 -t mangle -S 2>/dev/null | grep -q DBKEEPER-; then
	left+="the real node's iptables chains DBKEEPER-*"$'\n'
fi
if grep -q ' /tmp/[^ ]*/node/' /proc/self/mountinfo; then
	left+="mounts under a real node's run directory: $(grep -o ' /tmp/[^ ]*/node/[^ ]*' /proc/self/mountinfo | head -3 | tr '\n' ' ')"$'\n'
fi
# The instance agent's test: its agents and their PostgreSQL servers carry
# the test's directory in their arguments.
found=$(ps -eo pid=,args= | grep -F -e /dbkeeper-instance-test- -e /dbkeeper-archiver-test- | grep -v grep || true)
if [[ -n "$found" ]]; then
	left+="$found"$'\n'
fi
# The Prometheus devcluster runs (Debian's binary, so not under a tools
# directory): its arguments are internal/test/promrun's.
found=$(ps -eo pid=,args= | grep -F -e '--storage.tsdb.retention.time=1d --web.listen-address=127.0.0.1:' | grep -v grep || true)
if [[ -n "$found" ]]; then
	left+="$found"$'\n'
fi
for dir in "${dirs[@]}"; do
	found=$(ps -eo pid=,args= | awk -v d="$dir/" 'index($2, d) == 1 { print }' || true)
	if [[ -n "$found" ]]; then
		left+="$found"$'\n'
	fi
done
if [[ -n "$left" ]]; then
	echo "left behind by the tests:" >&2
	printf '%s' "$left" >&2
	exit 1
fi
echo "no test process left running"
