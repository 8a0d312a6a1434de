#!/usr/bin/env bash
# Install what building and testing Carmy needs on Debian/Ubuntu; with
# --build, what building it needs only (the quick start's: no database or
# cache servers, which Debian starts as services once installed).
set -euo pipefail
# g++ builds one test only, tests/libclient/check_cxx (the headers from C++).
pkgs=(build-essential g++ autoconf automake libtool m4 pkg-config
      liburcu-dev libmsgpack-dev libxxhash-dev check libsubunit-dev
      python3 procps python3-dev python3-msgpack python3-setuptools
      libhiredis-dev libpq-dev
      libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev
      scdoc man-db groff-base)
case "${1:-}" in
--build) ;;
"") pkgs+=(valgrind spin python3-pytest redis-server postgresql curl) ;;
*) echo "usage: $0 [--build]" >&2; exit 64 ;;
esac
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
