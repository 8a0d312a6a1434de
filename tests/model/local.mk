# tests/model: the Promela model of the slot protocol (make model)
#
# `make model` copies tests/model/carmy.pml to a temporary directory, has
# spin generate the verifier, compiles it and runs an exhaustive safety
# search. It fails unless pan reports "errors: 0" for a search that ran to
# its end. On failure the directory is kept (with the counterexample trail,
# carmy.pml.trail) and the command that replays it is printed.
# MODEL_FLAGS passes -D options to spin (see the top of carmy.pml and
# docs/model.md), e.g. make model MODEL_FLAGS=-DRESTART.
EXTRA_DIST += tests/model/carmy.pml

SPIN = spin
MODEL_FLAGS =
MODEL_PAN_CFLAGS = -O2 -DSAFETY -DCOLLAPSE -DMEMLIM=4096 -w
MODEL_PAN_RUNFLAGS = -m100000

.PHONY: model
model:
	@command -v $(SPIN) >/dev/null 2>&1 || { \
		echo "model: $(SPIN) not found (Debian/Ubuntu: apt-get install spin)" >&2; \
		exit 1; }
	@dir=$$(mktemp -d "$${TMPDIR:-/tmp}/carmy-model.XXXXXX") || exit 1; \
	cp "$(srcdir)/tests/model/carmy.pml" "$$dir/" || exit 1; \
	echo "model: spin -a $(MODEL_FLAGS) carmy.pml in $$dir"; \
	start=$$(date +%s); \
	( cd "$$dir" && \
	  $(SPIN) -a $(MODEL_FLAGS) carmy.pml && \
	  $(CC) $(MODEL_PAN_CFLAGS) -o pan pan.c && \
	  ./pan $(MODEL_PAN_RUNFLAGS) > pan.out 2>&1 ); \
	rc=$$?; end=$$(date +%s); \
	if [ -f "$$dir/pan.out" ]; then \
		grep -v '^Depth=' "$$dir/pan.out" | \
		grep -E 'errors:|states, stored|transitions|violated|error:|MEMLIM|not completed|elapsed' ; \
	fi; \
	echo "model: $$((end - start)) s in all (spin, cc and pan)"; \
	if [ $$rc -eq 0 ] && grep -q 'errors: 0' "$$dir/pan.out" && \
	   ! grep -qE 'Search not completed|max search depth too small|reached -DMEMLIM|out of memory' "$$dir/pan.out"; then \
		rm -rf "$$dir"; \
		echo "model: no errors"; \
	else \
		echo "model: FAILED; kept $$dir" >&2; \
		if [ -f "$$dir/carmy.pml.trail" ]; then \
			echo "model: replay with: cd $$dir && $(SPIN) -t -p $(MODEL_FLAGS) carmy.pml" >&2; \
		fi; \
		exit 1; \
	fi
