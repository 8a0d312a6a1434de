# tests/model: the Promela models of the slot protocol and of posted
# requests (make model)
#
# `make model` copies a model to a temporary directory and, for each
# configuration, has spin generate the verifier, compiles it and runs an
# exhaustive safety search. It fails unless pan reports "errors: 0" for a
# search that ran to its end. On failure the directory is kept, with the
# counterexample trail (MODEL.pml.trail), and the command that replays it
# is printed. The configurations (docs/model.md): carmy.pml with every
# starting table and client 1 killed at any point; then carmyd declaring
# client 1 dead while it runs (a carmyd restart), on the empty and the full
# table (in both, client 1 may also abandon its reservation: carmy_abandon;
# -DNO_ABANDON leaves that out); post.pml (posted requests and the loop's
# bell), without and with the client's safety net. MODEL_FLAGS runs one
# configuration of your own instead, of MODEL_FILE (default carmy.pml),
# e.g.
#   make model MODEL_FLAGS='-DRESTART -DOLD_SWEEP'
#   make model MODEL_FILE=post.pml MODEL_FLAGS=-DMUTATE_NO_LAST_LOOK
EXTRA_DIST += tests/model/carmy.pml tests/model/post.pml

SPIN = spin
MODEL_FLAGS =
MODEL_FILE = carmy.pml
# file:flags, one configuration each
MODEL_DEFAULT_RUNS = "carmy.pml:" "carmy.pml:-DRESTART -DNO_INIT1 -DNO_INIT2" \
	"post.pml:" "post.pml:-DSAFETY_NET"
MODEL_PAN_CFLAGS = -O2 -DSAFETY -DCOLLAPSE -DMEMLIM=4096 -w
MODEL_PAN_RUNFLAGS = -m100000

.PHONY: model
model:
	@command -v $(SPIN) >/dev/null 2>&1 || { \
		echo "model: $(SPIN) not found (Debian/Ubuntu: apt-get install spin)" >&2; \
		exit 1; }
	@if [ -n "$(MODEL_FLAGS)" ]; then set -- "$(MODEL_FILE):$(MODEL_FLAGS)"; \
	else set -- $(MODEL_DEFAULT_RUNS); fi; \
	for run in "$$@"; do \
		pml=$${run%%:*}; flags=$${run#*:}; \
		dir=$$(mktemp -d "$${TMPDIR:-/tmp}/carmy-model.XXXXXX") || exit 1; \
		cp "$(srcdir)/tests/model/$$pml" "$$dir/" || exit 1; \
		echo "model: spin -a $$flags $$pml"; \
		start=$$(date +%s); \
		( cd "$$dir" && \
		  $(SPIN) -a $$flags $$pml && \
		  $(CC) $(MODEL_PAN_CFLAGS) -o pan pan.c && \
		  ./pan $(MODEL_PAN_RUNFLAGS) > pan.out 2>&1 ); \
		rc=$$?; end=$$(date +%s); \
		if [ -f "$$dir/pan.out" ]; then \
			grep -v '^Depth=' "$$dir/pan.out" | \
			grep -E 'errors:|states, stored|violated|error:|MEMLIM|not completed|elapsed'; \
		fi; \
		if [ $$rc -eq 0 ] && grep -q 'errors: 0' "$$dir/pan.out" && \
		   ! grep -qE 'Search not completed|max search depth too small|reached -DMEMLIM|out of memory' "$$dir/pan.out"; then \
			rm -rf "$$dir"; \
			echo "model: no errors ($$((end - start)) s with spin and cc)"; \
		else \
			echo "model: FAILED; kept $$dir" >&2; \
			if [ -f "$$dir/$$pml.trail" ]; then \
				echo "model: replay with: cd $$dir && $(SPIN) -t -p $$flags $$pml" >&2; \
			fi; \
			exit 1; \
		fi; \
	done
