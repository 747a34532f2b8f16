#!/usr/bin/env bash
# Installs uv for the current user (no root needed) and prints where, unless it is installed.
# Called by scripts/bootstrap.sh. Debian 12 and Ubuntu 24.04 refuse `pip install --user`
# (PEP 668: the system Python is "externally managed"), so the order is:
#   1. uv already on PATH or in ~/.local/bin: nothing to do;
#   2. pipx, when it is installed: `pipx install uv`;
#   3. `pip install --user uv`, where the system Python allows it;
#   4. a virtualenv of its own (~/.local/share/trainwatch/uv-venv) with uv in it, linked as
#      ~/.local/bin/uv: needs the venv module (Debian/Ubuntu package python3-venv).
# It never uses --break-system-packages.
set -euo pipefail

say() { printf '\033[1;34m[bootstrap]\033[0m %s\n' "$*" >&2; }

bin_dir="$HOME/.local/bin"
export PATH="$bin_dir:$PATH"
if command -v uv >/dev/null 2>&1; then
  exit 0
fi

if command -v pipx >/dev/null 2>&1; then
  say "installing uv with pipx"
  pipx install --quiet uv >/dev/null && command -v uv >/dev/null 2>&1 && exit 0
fi

if python3 -m pip --version >/dev/null 2>&1; then
  if output=$(python3 -m pip install --quiet --user uv 2>&1); then
    say "installed uv with pip --user"
    exit 0
  fi
  if ! grep -q "externally-managed-environment" <<<"$output"; then
    printf '%s\n' "$output" >&2
    say "pip install --user uv failed (above)"
    exit 1
  fi
fi

venv="$HOME/.local/share/trainwatch/uv-venv"
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  say "cannot install uv: this Python has no venv module; run: sudo apt-get install -y python3-venv"
  say "(or install uv yourself: https://docs.astral.sh/uv/getting-started/installation/)"
  exit 1
fi
say "installing uv in its own virtualenv ($venv; the system Python is externally managed)"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check uv
mkdir -p "$bin_dir"
ln -sf "$venv/bin/uv" "$bin_dir/uv"
ln -sf "$venv/bin/uvx" "$bin_dir/uvx"
say "uv is $bin_dir/uv ($("$bin_dir/uv" --version)); add $bin_dir to your PATH"
