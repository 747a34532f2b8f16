#!/usr/bin/env bash
# Prints, on one line, which of the given package names apt cannot install here: names with no
# candidate version in this system's apt sources (a name of another distribution: Ubuntu 24.04 has
# no chromium deb, for one). Prints nothing when every one can be installed. Needs no root, but
# reads the package lists as they are: run `apt-get update` first on a fresh system.
#
#   scripts/apt_unavailable.sh redis-server chromium postgresql
set -euo pipefail

unavailable=()
for pkg in "$@"; do
  # "Candidate: (none)" for a known name without an installable version; nothing for an unknown
  # one. Read whole before matching: grep -q stopping early would fail the pipe (pipefail).
  policy=$(apt-cache policy "$pkg" 2>/dev/null || true)
  if ! grep -q '^ *Candidate: [^(]' <<<"$policy"; then
    unavailable+=("$pkg")
  fi
done
echo "${unavailable[*]}"
