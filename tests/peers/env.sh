#!/usr/bin/env bash
# Makes, or reuses, the pinned virtual environment the peers' tests run in,
# and prints its path on stdout (progress goes to stderr).
#
# Every tests/peers/requirements-*.txt is installed into one venv outside the
# repository, and every pin of a versions-*.txt (older releases a test
# loads one at a time) into <venv>/versions/<name>-<version>, without
# dependencies: ${PACKD_PEER_ENV:-$HOME/.cache/packd-peers/<key>}, where <key>
# hashes the Python version and the requirement files, so a venv is reused
# while the pins are unchanged and made afresh when one changes. A line
# marked "# --no-deps" is installed without its dependencies (a peer whose
# full dependency set is far larger than what its tested modules import).
# Packages come from the package registry pip is configured for; when it
# cannot be reached, pip fails and so does this script (never a silent skip).
# A venv is marked complete only after every install succeeded.
#
# Environment: PACKD_PEER_PYTHON (the interpreter, default python3, which must
# have the venv module), PACKD_PEER_ENV (the venv's path).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${PACKD_PEER_PYTHON:-python3}
shopt -s nullglob
reqs=("$here"/requirements-*.txt)
versions=("$here"/versions-*.txt)
if [ ${#reqs[@]} -eq 0 ]; then
  echo "env.sh: no requirements-*.txt in $here" >&2
  exit 1
fi
key=$({ "$py" -c 'import sys; print(sys.version)'; cat "${reqs[@]}" "${versions[@]}"; } | sha256sum | cut -c1-16)
dir=${PACKD_PEER_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/packd-peers/$key}
mkdir -p "$(dirname "$dir")"
# One maker at a time: a second caller waits, then finds the venv complete.
exec 9>"$dir.lock"
flock 9
if [ -f "$dir/.packd-complete" ] && [ "$(cat "$dir/.packd-complete")" = "$key" ]; then
  echo "$dir"
  exit 0
fi
echo "env.sh: making the peers' venv in $dir (torch and its CUDA libraries: a few GB, minutes)" >&2
rm -rf "$dir"
"$py" -m venv "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat "${reqs[@]}" | grep -v -- '# --no-deps' >"$tmp/deps.txt"
cat "${reqs[@]}" | grep -- '# --no-deps' | sed 's/#.*//' >"$tmp/nodeps.txt" || true
pip=("$dir/bin/python" -m pip --disable-pip-version-check --no-input)
start=$(date +%s)
"${pip[@]}" install -q -r "$tmp/deps.txt" >&2
if [ -s "$tmp/nodeps.txt" ]; then
  "${pip[@]}" install -q --no-deps -r "$tmp/nodeps.txt" >&2
fi
for pin in $(cat "${versions[@]}" /dev/null | sed 's/#.*//'); do
  "${pip[@]}" install -q --no-deps --target "$dir/versions/${pin/==/-}" "$pin" >&2
done
echo "env.sh: venv made in $(($(date +%s) - start)) s" >&2
echo "$key" >"$dir/.packd-complete"
echo "$dir"
