#!/usr/bin/env bash
# make check-deb: the Debian package from end to end, on this machine (root
# and apt, as CI has). From the tarball TARBALL (make dist's): install the
# build dependencies (apt-get build-dep), dpkg-buildpackage -us -uc -b,
# lintian (no error), apt-get install ./*.deb, every program's --version
# and a program built against libcarmy-dev agree with debian/changelog;
# carmyd started as the packaged user with the packaged unit's command line
# serves carmy-run and carmyctl; apt-get remove keeps its journal and its
# segment, and apt-get purge then leaves none of the packages' files, nor
# what carmyd made at run time. The carmy user stays (Debian policy).
# Before installing, the built postinst and prerm are run with stubs for
# the helpers they call: what they start, restart and enable.
# DEB_BUILD_OPTIONS passes through (nocheck: no make check).
#
# usage: check_deb.sh TARBALL
set -euo pipefail
export LC_ALL=C DEBIAN_FRONTEND=noninteractive
tarball=$(realpath "$1")
pkgs=(carmy carmy-gateway carmy-store-pg libcarmy1 libcarmy-dev)
[ "$(id -u)" -eq 0 ] || { echo "check-deb: needs root (apt-get)" >&2; exit 77; }

n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
fail() { n=$((n + 1)); echo "not ok $n - $*"; exit 1; }

work=$(mktemp -d /tmp/carmy-deb.XXXXXX)
carmyd_pid= installed=
cleanup() {
	if [ -n "$carmyd_pid" ]; then
		kill -TERM "$carmyd_pid" 2>/dev/null || true
		wait "$carmyd_pid" 2>/dev/null || true
	fi
	# A failed check leaves the machine as it found it.
	[ -z "$installed" ] || apt-get purge -y -qq "${pkgs[@]}" >/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
# _apt reads the .debs apt-get install is given.
chmod 755 "$work"
tar -xzf "$tarball" -C "$work"
src=$(echo "$work"/carmy-*/)
cd "$src"

# --- build ---------------------------------------------------------------
apt-get build-dep -y -qq ./ >/dev/null 2>&1 ||
	{ apt-get update -qq && apt-get build-dep -y -qq ./ >/dev/null; }
ok "apt-get build-dep ./"
dpkg -s lintian >/dev/null 2>&1 || apt-get install -y -qq lintian >/dev/null
if dpkg-buildpackage -us -uc -b -j"$(nproc)" > "$work/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc -b"
else
	tail -n 60 "$work/build.log"
	fail "dpkg-buildpackage -us -uc -b"
fi
version=$(dpkg-parsechangelog -S Version)
changes=$(echo "$work"/carmy_"$version"_*.changes)
if lintian --fail-on error "$changes" > "$work/lintian.log" 2>&1; then
	ok "lintian: no error ($(grep -c '^W:' "$work/lintian.log") warnings)"
else
	cat "$work/lintian.log"
	fail "lintian: no error"
fi
sed 's/^/# /' "$work/lintian.log"

# --- maintainer scripts --------------------------------------------------
# What carmy's and carmy-gateway's postinst and prerm ask of systemd at an
# install, an upgrade and a removal: each script runs with the helpers it
# calls replaced by stubs that write down their arguments, and with its
# test for a running systemd (/run/systemd/system) pointed at a directory
# of ours. An upgrade restarts the services and never stops or restarts a
# socket (connections queued on it would be dropped); the gateway's units
# are not enabled at install (its tools file is not there yet).
stubs=$work/stubs calls=$work/calls
mkdir -p "$stubs" "$work/systemd-running"
for tool in deb-systemd-invoke deb-systemd-helper systemctl \
	    systemd-sysusers systemd-tmpfiles; do
	# As at a first install: no unit was installed before, and
	# was-enabled is true of a unit never seen (deb-systemd-helper(1)).
	cat > "$stubs/$tool" <<-EOF
	#!/bin/sh
	echo "$tool \$*" >> "\$CALLS"
	case "\$*" in *debian-installed*) exit 1 ;; esac
	exit 0
	EOF
	chmod +x "$stubs/$tool"
done
# maint PKG SCRIPT ARGS...: the helpers' calls, one a line, of PKG's
# SCRIPT run with ARGS.
maint() {
	local pkg=$1 script=$2 ctrl=$work/ctrl/$1
	shift 2
	# Called as out=$(maint ...) || fail: set -e does not hold in here.
	[ -d "$ctrl" ] || {
		mkdir -p "$work/ctrl" &&
		dpkg-deb -e "$(echo "$work/${pkg}_${version}"_*.deb)" "$ctrl"
	} || return
	[ -f "$ctrl/$script" ] || return 0
	sed "s|/run/systemd/system|$work/systemd-running|g" "$ctrl/$script" \
		> "$work/script" || return
	: > "$calls"
	CALLS=$calls PATH=$stubs:$PATH sh "$work/script" "$@" >&2 || return
	cat "$calls"
}
# invokes OUT ACTION UNIT: OUT has deb-systemd-invoke ACTION for UNIT.
invokes() {
	grep -qE "^deb-systemd-invoke $2( \S+)* $3( |$)" <<<"$1"
}
wrong=
for pkg in carmy carmy-gateway; do
	unit=carmyd; [ "$pkg" = carmy ] || unit=$pkg
	out=$(maint "$pkg" postinst configure) || fail "$pkg.postinst configure"
	# Each package makes its own user, carmy's never the gateway's.
	grep -qE "^systemd-sysusers( .*)? $pkg\.conf$" <<<"$out" ||
		wrong="$wrong; $pkg.postinst does not run sysusers on $pkg.conf"
	if [ "$pkg" = carmy ] &&
	   grep -q '^systemd-sysusers .*carmy-gateway' <<<"$out"; then
		wrong="$wrong; carmy.postinst makes the gateway's user"
	fi
	if [ "$pkg" = carmy ]; then
		for u in "$unit.socket" "$unit.service"; do
			grep -qx "deb-systemd-helper enable $u" <<<"$out" ||
				wrong="$wrong; install does not enable $u"
			invokes "$out" start "$u" ||
				wrong="$wrong; install does not start $u"
		done
	elif grep -q "^deb-systemd-helper enable" <<<"$out"; then
		wrong="$wrong; install enables the gateway's units"
	fi
	out=$(maint "$pkg" postinst configure 0.0.1) ||
		fail "$pkg.postinst configure 0.0.1"
	invokes "$out" '(try-)?restart' "$unit.service" ||
		wrong="$wrong; an upgrade does not restart $unit.service"
	bad=$(grep -E '^deb-systemd-invoke (stop|(try-)?restart|reload) .*\.socket' \
		<<<"$out" || true)
	[ -z "$bad" ] ||
		wrong="$wrong; an upgrade stops or restarts a socket: $bad"
	out=$(maint "$pkg" prerm upgrade 9999) || fail "$pkg.prerm upgrade"
	if grep -q "^deb-systemd-invoke stop" <<<"$out"; then
		wrong="$wrong; $pkg.prerm stops units at an upgrade"
	fi
	out=$(maint "$pkg" prerm remove) || fail "$pkg.prerm remove"
	for u in "$unit.socket" "$unit.service"; do
		invokes "$out" stop "$u" ||
			wrong="$wrong; removing $pkg does not stop $u"
	done
done
[ -z "$wrong" ] || fail "maintainer scripts:${wrong#;}"
ok "maintainer scripts: each makes its own user; an upgrade restarts the services, never a socket; the gateway's units are not enabled at install"

# --- install -------------------------------------------------------------
dpkg -s carmy >/dev/null 2>&1 && apt-get purge -y -qq "${pkgs[@]}" >/dev/null
debs=()
for p in "${pkgs[@]}"; do
	debs+=("$(echo "$work/${p}_${version}"_*.deb)")
done
installed=yes
apt-get install -y -qq "${debs[@]}" >/dev/null
ok "apt-get install ./*.deb"
# What each package put on the system, to check it is gone after the purge.
for p in "${pkgs[@]}"; do dpkg -L "$p"; done | sort -u > "$work/files"

# --- versions ------------------------------------------------------------
wrong=
for prog in carmyd carmyctl carmy-run carmy-gateway; do
	out=$("/usr/bin/$prog" --version 2>&1) || true
	[ "$out" = "$prog $version" ] || wrong="$wrong $prog:'$out'"
done
pc=$(pkg-config --modversion libcarmy)
[ "$pc" = "$version" ] || wrong="$wrong libcarmy.pc:'$pc'"
cat > "$work/version.c" <<'EOF'
#include <stdio.h>
#include <carmy.h>
int main(void) { puts(carmy_version(NULL, NULL, NULL)); return 0; }
EOF
# shellcheck disable=SC2046
cc -o "$work/version" "$work/version.c" $(pkg-config --cflags --libs libcarmy)
lib=$("$work/version")
[ "$lib" = "$version" ] || wrong="$wrong carmy_version():'$lib'"
[ -z "$wrong" ] || fail "every --version, libcarmy.pc and carmy_version() say $version:$wrong"
ok "every --version, libcarmy.pc and carmy_version() say $version"
[ -e "$(pkg-config --variable=libdir libcarmy)/carmy/carmy_store_pg.so" ] ||
	fail "carmy_store_pg.so is in pkglibdir"

# --- carmyd as the packaged unit runs it ---------------------------------
# systemd is not PID 1 here: what the unit asks of it (its user, its
# RuntimeDirectory and StateDirectory, its socket) is done by hand.
unit=
for d in /usr/lib/systemd/system /lib/systemd/system; do
	[ -f "$d/carmyd.service" ] && { unit=$d/carmyd.service; break; }
done
# The value of KEY= in a unit file (the last one set).
unit_key() { sed -n "s/^$2=//p" "$1" | tail -n 1; }
# systemd's specifiers a system unit's paths use.
specifiers() {
	sed 's|%t|/run|g; s|%S|/var/lib|g; s|%L|/var/log|g; s|%C|/var/cache|g; s|%%|%|g'
}
user=carmy group=carmy runtime=carmy state=carmy listen=
runtime_mode=0755 state_mode=0755
if [ -n "$unit" ]; then
	cmd=$(unit_key "$unit" ExecStart | sed 's/^[-@:+!]*//' | specifiers)
	user=$(unit_key "$unit" User); user=${user:-carmy}
	group=$(unit_key "$unit" Group); group=${group:-$user}
	runtime=$(unit_key "$unit" RuntimeDirectory)
	state=$(unit_key "$unit" StateDirectory)
	runtime_mode=$(unit_key "$unit" RuntimeDirectoryMode)
	state_mode=$(unit_key "$unit" StateDirectoryMode)
	sock=${unit%.service}.socket
	[ -f "$sock" ] && listen=$(unit_key "$sock" ListenStream | specifiers)
	ok "the unit's command line ($unit): $cmd"
else
	# No unit in this tree yet: the command line a system carmyd runs
	# with (README, Installing).
	cmd="/usr/bin/carmyd --foreground --socket /run/carmy/carmyd.sock --group carmy --store journal:/var/lib/carmy/journal"
	ok "# SKIP no carmyd.service installed: the documented command line: $cmd"
fi
dpkg -L carmy | grep -q '/sysusers\.d/carmy\.conf$' ||
	fail "carmy ships a sysusers.d file"
# The gateway's user is made by the gateway's package, a member of carmy.
dpkg -L carmy-gateway | grep -q '/sysusers\.d/carmy-gateway\.conf$' ||
	fail "carmy-gateway ships a sysusers.d file"
conf=$(dpkg -L carmy | grep '/sysusers\.d/carmy\.conf$' | head -n 1)
! grep -qE '^[um][[:space:]]+carmy-gateway[[:space:]]' "$conf" ||
	fail "carmy's sysusers.d file leaves the gateway's user to its package"
id -nG carmy-gateway 2>/dev/null | tr ' ' '\n' | grep -qx carmy ||
	fail "carmy-gateway's package made its user, a member of carmy"
getent passwd "$user" >/dev/null || fail "the package made the user $user"
for d in $runtime; do
	install -d -o "$user" -g "$group" -m "${runtime_mode:-0755}" "/run/$d"
done
for d in $state; do
	install -d -o "$user" -g "$group" -m "${state_mode:-0755}" "/var/lib/$d"
done
socket=$(sed -n 's/.*--socket[= ]\([^ ]*\).*/\1/p' <<<"$cmd")
socket=${socket:-${listen:-/run/carmy/carmyd.sock}}
read -r -a argv <<<"$cmd"
if [ -n "$listen" ]; then
	# Socket activation as carmyd.socket would give it.
	argv=(systemd-socket-activate -l "$listen" "${argv[@]}")
fi
# As systemd runs it: exec'd as the user (setpriv execs where runuser
# would stay in between and hide carmyd's exit status).
setpriv --reuid "$user" --regid "$group" --init-groups -- "${argv[@]}" \
	> "$work/carmyd.out" 2> "$work/carmyd.err" &
carmyd_pid=$!

# Clients: carmy's own user first, polling (with a deadline) until carmyd
# answers.
as_user() { runuser -u "$user" -- "$@"; }
deadline=$((SECONDS + 60))
until as_user carmyctl --socket "$socket" status > "$work/status" 2>&1; do
	if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$carmyd_pid" 2>/dev/null; then
		cat "$work/carmyd.err" "$work/status" >&2
		fail "carmyd answers carmyctl status on $socket"
	fi
	sleep 0.2
done
# Without --foreground carmyd detaches once ready (its parent exits 0):
# stop the carmyd of this socket, whose pid its lock file's holder is.
if ! kill -0 "$carmyd_pid" 2>/dev/null; then
	wait "$carmyd_pid" || fail "carmyd detached cleanly"
	carmyd_pid=$(fuser "$socket.lock" 2>/dev/null | tr -d ' ')
	[ -n "$carmyd_pid" ] || fail "the detached carmyd holds $socket.lock"
fi
ok "carmyd answers carmyctl status on $socket"
if [ -n "$listen" ]; then
	# What systemd does to the socket it listens on for carmyd.socket.
	sock_mode=$(unit_key "$sock" SocketMode)
	sock_group=$(unit_key "$sock" SocketGroup)
	[ -z "$sock_group" ] || chgrp "$sock_group" "$listen"
	[ -z "$sock_mode" ] || chmod "$sock_mode" "$listen"
fi
# Another user, in carmyd's group as README's Installing says to add one
# (nobody, with the group added for this command only).
if grep -q -- "--group $group" <<<"$cmd"; then
	setpriv --reuid nobody --regid nogroup --groups "$group" -- \
		env CARMY_TRUSTED_USERS="$user" \
		carmyctl --socket "$socket" status >/dev/null ||
		fail "a member of the group $group, trusting $user, talks to carmyd"
	ok "a member of the group $group, trusting $user, talks to carmyd"
fi
run=(as_user carmy-run --socket "$socket" --principal deb --session check
     --request-id "r-$$" -- sh -c 'echo $$')
first=$("${run[@]}") || fail "carmy-run runs its command"
again=$("${run[@]}") || fail "carmy-run replays"
[ -n "$first" ] && [ "$first" = "$again" ] ||
	fail "the retry replays the first run ('$first', then '$again')"
ok "carmy-run ran once and replayed ($first)"

kill -TERM "$carmyd_pid"
if wait "$carmyd_pid" 2>/dev/null; then
	:
elif [ $? -eq 127 ]; then
	# Not our child (it detached): wait for it to be gone.
	while kill -0 "$carmyd_pid" 2>/dev/null; do sleep 0.2; done
else
	rc=$?
	cat "$work/carmyd.err" >&2
	fail "carmyd stops cleanly on SIGTERM (exit $rc)"
fi
carmyd_pid=
ok "carmyd stops on SIGTERM"

# --- remove, then purge --------------------------------------------------
uid=$(id -u "$user")
apt-get remove -y -qq "${pkgs[@]}" >/dev/null
# remove keeps carmyd's data: the journal, and the segment carmyd made
# (docs/operations.md, "Removing the package").
gone=
for f in /var/lib/carmy/journal /dev/shm/carmy."$uid".*; do
	[ -e "$f" ] || gone="$gone $f"
done
[ -z "$gone" ] || fail "apt-get remove keeps the journal and the segment:$gone"
ok "apt-get remove keeps the journal and the segment"
# What remove left known to dpkg (its configuration files kept): the
# others, gone whole, are no longer packages apt-get can name.
kept=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 && kept+=("$p")
done
[ ${#kept[@]} -eq 0 ] || apt-get purge -y -qq "${kept[@]}" >/dev/null
installed=
ok "apt-get purge"
left=
while read -r f; do
	[ -e "$f" ] && [ "$f" != /. ] || continue
	# A directory stays when another package has it too (/usr/bin).
	[ -d "$f" ] && dpkg -S "$f" >/dev/null 2>&1 && continue
	left="$left $f"
done < "$work/files"
for f in /var/lib/carmy /run/carmy /dev/shm/carmy."$uid".* \
	 /etc/systemd/system/*/carmy* \
	 /var/lib/carmy-gateway /var/lib/systemd/deb-systemd-helper-enabled/carmy* \
	 /var/lib/systemd/deb-systemd-helper-enabled/*/carmy* \
	 /var/lib/dpkg/info/carmy*.* /var/lib/dpkg/info/libcarmy*.*; do
	[ -e "$f" ] && left="$left $f"
done
[ -z "$left" ] || fail "nothing is left after the purge:$left"
ok "nothing is left after the purge (the user $user stays)"
echo "1..$n"
