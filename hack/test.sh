#!/usr/bin/env bash
# test.sh runs the Go tests of `make test` (all) or `make test-fast` (fast)
# and ends with a table of the time each package and each real-node
# scenario took (hack/testtimes).
#
#   all   every package. The tests that run a real node (test/realnode,
#         test/userpath, TestInCluster of test/deploy and two tests of
#         internal/test/devcluster) run one package at a time, since one
#         real node at a time fits a machine, after the other packages,
#         which run TEST_P at a time.
#   fast  unit and envtest packages, TEST_P at a time: no real node, no
#         devcluster suite (test/e2e, test/faults), no container, and none
#         of the tests that run real PostgreSQL servers (*_pg_test.go).
#
# TEST_FLAGS are more flags of go test (default -count=1 -timeout 30m);
# REALNODE_SCENARIOS how many real-node scenarios run at once (default 2);
# TEST_JSON_DIR, when set, keeps go test's JSON output there (every test's
# log, passing ones too).
# Usage: hack/test.sh all|fast
set -uo pipefail

mode=${1:-}
if [[ $mode != all && $mode != fast ]]; then
	echo "usage: hack/test.sh all|fast" >&2
	exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
read -r -a flags <<<"${TEST_FLAGS:--count=1 -timeout 30m}"
parallel_packages=${TEST_P:-2}
module=$(go list -m)

# The packages whose every test runs a real node (or make run, which the
# README's walk-throughs start one after the other), and the real-node tests
# of packages that otherwise need none: those run with the other packages.
realnode_packages=(test/realnode test/userpath)
realnode_tests='^(TestObjectStoreOnRealNode|TestHostStateCleanup|TestInCluster)$'
realnode_tests_in=(internal/test/devcluster internal/test/devcluster/nodehost test/deploy)
# What test-fast leaves out besides: the devcluster suites, the deployment
# tests (cert-manager, the manager's image), the images run in containers
# (runc), and the tests of *_pg_test.go files, which run real PostgreSQL
# servers (most of their time is waiting out timeouts).
slow_packages=(test/e2e test/faults test/benchreplication test/deploy)
pg_tests=$(git ls-files '*_pg_test.go' | xargs grep -ho '^func Test[A-Za-z0-9_]*' | awk '{print $2}' | sort -u | paste -sd'|')
slow_tests="^(TestEngineImagesWithRunc${pg_tests:+|$pg_tests})\$"

exclude=("${realnode_packages[@]}")
skip=$realnode_tests
if [[ $mode == fast ]]; then
	exclude+=("${slow_packages[@]}")
	skip="$realnode_tests|$slow_tests"
fi
others=()
while read -r pkg; do
	short=${pkg#"$module"/}
	for x in "${exclude[@]}"; do
		[[ $short == "$x" ]] && continue 2
	done
	others+=("$pkg")
done < <(go list ./...)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/testtimes" ./hack/testtimes || exit 1
scenarios=$(
	IFS=,
	echo "${realnode_packages[*]},test/deploy"
)
summarize() { "$tmp/testtimes" -scenarios "$scenarios" -table=false -save "$1"; }
start=$SECONDS

status=0
go test -json -p "$parallel_packages" "${flags[@]}" -skip "$skip" "${others[@]}" | summarize "$tmp/others.json" || status=1
if [[ $mode == all ]]; then
	# The real-node packages after the other packages, one at a time,
	# alone on the machine, two scenarios at a time (REALNODE_SCENARIOS).
	# Side by side, even with the others at a lower CPU priority, two slow
	# cores (the set-up took 33-43 min from cold) ran at a load average of
	# 40-90: a 3-replica Database took 150 s to become Ready instead of 19,
	# and every kind of step missed its bound (a switchover in 2 min, a
	# Backup in 3, psql's 5 s connect timeout).
	{
		go test -json -p 1 -parallel "${REALNODE_SCENARIOS:-2}" "${flags[@]}" "${realnode_packages[@]/#/./}"
		rc=$?
		go test -json -p 1 "${flags[@]}" -run "$realnode_tests" "${realnode_tests_in[@]/#/./}" || rc=1
		exit $rc
	} | summarize "$tmp/realnode.json" || status=1
fi
cat "$tmp"/*.json | "$tmp/testtimes" -scenarios "$scenarios" -output=false || status=1
if [[ -n ${TEST_JSON_DIR:-} ]]; then
	mkdir -p "$TEST_JSON_DIR" && cp "$tmp"/*.json "$TEST_JSON_DIR"/
fi
echo "go test: $((SECONDS - start)) s from start to end ($mode)"
exit $status
