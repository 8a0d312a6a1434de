#!/usr/bin/env bash
# Install what building and testing Carmy needs on Debian/Ubuntu.
set -euo pipefail
# g++ builds one test only, tests/libclient/check_cxx (the headers from C++).
pkgs=(build-essential g++ autoconf automake libtool m4 pkg-config
      liburcu-dev libmsgpack-dev libxxhash-dev check libsubunit-dev
      python3 procps valgrind spin
      python3-dev python3-pytest python3-msgpack python3-setuptools
      redis-server libhiredis-dev postgresql libpq-dev
      libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev curl
      scdoc man-db groff-base)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
