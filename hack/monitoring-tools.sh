#!/usr/bin/env bash
# monitoring-tools.sh builds the binaries the monitoring tests need from the
# Go module proxy into DIR: promtool, which checks and unit-tests the alert
# rules of config/prometheus (test/monitoring), from its wrapper module
# hack/prometheus. A binary is rebuilt only when the version of its module
# differs from the one recorded beside it (DIR/.NAME.version;
# hack/lib/go-tools.sh).
# Usage: hack/monitoring-tools.sh DIR
set -euo pipefail

dir=${1:?usage: hack/monitoring-tools.sh DIR}
# shellcheck source=lib/go-tools.sh
. "$(dirname "$0")/lib/go-tools.sh"

# name  module-dir  module  package
build_go_tools monitoring-tools "$dir" "cold, about 10 minutes on two idle cores" \
	"promtool prometheus github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/promtool"
