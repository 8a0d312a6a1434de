# Man pages. Each man/PAGE.scd is written in scdoc; the pages it makes
# are distributed (dist_man_MANS), so a build from the tarball needs no
# scdoc. The .so pages name the page that describes their function.
man_scd = \
	man/carmyd.8.scd \
	man/carmyctl.8.scd \
	man/carmy-gateway.8.scd \
	man/carmy-run.1.scd \
	man/carmy-bench.1.scd \
	man/libcarmy.3.scd \
	man/carmy_connect.3.scd \
	man/carmy_begin.3.scd \
	man/carmy_complete.3.scd \
	man/carmy_wait.3.scd \
	man/carmy_resolve.3.scd \
	man/carmy_store.3.scd
man_generated = \
	man/carmyd.8 \
	man/carmyctl.8 \
	man/carmy-gateway.8 \
	man/carmy-run.1 \
	man/carmy-bench.1 \
	man/libcarmy.3 \
	man/carmy_connect.3 \
	man/carmy_begin.3 \
	man/carmy_complete.3 \
	man/carmy_wait.3 \
	man/carmy_resolve.3 \
	man/carmy_store.3
man_links = \
	man/carmy_abandon.3 \
	man/carmy_close.3 \
	man/carmy_default_socket.3 \
	man/carmy_durable.3 \
	man/carmy_errname.3 \
	man/carmy_max_result.3 \
	man/carmy_release.3 \
	man/carmy_reservation_clear.3 \
	man/carmy_set_result_format.3 \
	man/carmy_state_name.3 \
	man/carmy_status_name.3 \
	man/carmy_strerror.3 \
	man/carmy_trust_detail.3 \
	man/carmy_try_begin.3 \
	man/carmy_version.3
dist_man_MANS = $(man_generated) $(man_links)
EXTRA_DIST += $(man_scd)
MAINTAINERCLEANFILES = $(man_generated)

# One rule for every page: each depends on every source (they are few and
# scdoc is quick), and reads its own from the build or the source tree.
$(man_generated): $(man_scd)
	$(AM_V_GEN)$(MKDIR_P) man && \
	if test -z "$(SCDOC)"; then \
		echo "$@: scdoc is needed to make it (scripts/deps.sh)" >&2; \
		exit 1; \
	fi && \
	if test -f $@.scd; then s=$@.scd; else s=$(srcdir)/$@.scd; fi && \
	$(SCDOC) < $$s > $@.tmp && mv $@.tmp $@
