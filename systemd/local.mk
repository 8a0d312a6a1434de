# systemd/: the units of carmyd and carmy-gateway as system services, and
# the user and socket directory they need (sysusers.d, tmpfiles.d). The
# .service files name the installed programs: made from .in here, at make
# time, from $(bindir) and $(sysconfdir). configure says where each kind
# goes (--with-systemdsystemunitdir, --with-sysusersdir,
# --with-tmpfilesdir; default: pkg-config's systemd; no: not installed).
systemd_made = systemd/carmyd.service systemd/carmy-gateway.service
systemd_sockets = systemd/carmyd.socket systemd/carmy-gateway.socket
EXTRA_DIST += systemd/carmyd.service.in systemd/carmy-gateway.service.in \
	$(systemd_sockets) systemd/sysusers.d/carmy.conf \
	systemd/sysusers.d/carmy-gateway.conf \
	systemd/tmpfiles.d/carmy.conf
CLEANFILES += $(systemd_made)
# Made whether or not they are installed: tests/systemd/ verifies them.
noinst_DATA = $(systemd_made)

# make distcheck installs under its own prefix, never in the system's
# directories.
AM_DISTCHECK_CONFIGURE_FLAGS =
if HAVE_SYSTEMDSYSTEMUNITDIR
systemdsystemunit_DATA = $(systemd_made) $(systemd_sockets)
AM_DISTCHECK_CONFIGURE_FLAGS += \
	--with-systemdsystemunitdir=$$dc_install_base/$(systemdsystemunitdir)
endif
if HAVE_SYSUSERSDIR
sysusers_DATA = systemd/sysusers.d/carmy.conf \
	systemd/sysusers.d/carmy-gateway.conf
AM_DISTCHECK_CONFIGURE_FLAGS += \
	--with-sysusersdir=$$dc_install_base/$(sysusersdir)
endif
if HAVE_TMPFILESDIR
tmpfiles_DATA = systemd/tmpfiles.d/carmy.conf
AM_DISTCHECK_CONFIGURE_FLAGS += \
	--with-tmpfilesdir=$$dc_install_base/$(tmpfilesdir)
endif

systemd_edit = sed -e 's|@bindir[@]|$(bindir)|g' \
	-e 's|@sysconfdir[@]|$(sysconfdir)|g'

systemd/carmyd.service: systemd/carmyd.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && \
	$(systemd_edit) $(srcdir)/systemd/carmyd.service.in > $@.tmp && \
	mv $@.tmp $@

systemd/carmy-gateway.service: systemd/carmy-gateway.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && \
	$(systemd_edit) $(srcdir)/systemd/carmy-gateway.service.in > $@.tmp && \
	mv $@.tmp $@
