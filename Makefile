# make test is what CI runs (.ci/run calls it on a clean clone); make check
# is the fast loop it starts with. CONTRIBUTING.md says what each runs.
GO      ?= go
PKGS    := ./...
BIN     := bin
# VERSION names the build in --version, the start log line and the build
# info metric (the go command stamps no commit in a Git worktree or with
# -buildvcs=false).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)

.PHONY: all build install check test fmt-check vet staticcheck unit-short unit e2e gitea gitea-frontend git bench fleet fuzz demo clean stress

all: build

# The gate's hook program runs in Gitea's environment, perhaps Gitea's
# container: it is built static, with CGO_ENABLED=0, beside collab-sidecar,
# which looks for it there.
build:
	CGO_ENABLED=1 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/ $$($(GO) list ./cmd/... | grep -v '/cmd/collab-gate-hook$$')
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/ ./cmd/collab-gate-hook

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# staticcheck is pinned in go.mod's tool block: go tool builds it (once,
# cached) at that version, so nothing needs installing.
staticcheck:
	$(GO) tool staticcheck $(PKGS)

# unit-short runs the tests that need neither Gitea nor Chromium, without
# the race detector: -short skips plugin/gitea's tests against a real
# Gitea, and integration/ (all of it needs one) is left out.
SHORT_PKGS = $(shell $(GO) list $(PKGS) | grep -v '/integration')
unit-short:
	CGO_ENABLED=1 $(GO) test -short -count=1 $(SHORT_PKGS)

# check is the fast inner loop: under a minute once the build cache is
# warm (CONTRIBUTING.md has a measured figure).
check: fmt-check vet staticcheck unit-short

# gitea builds (once, cached outside the work tree) the real Gitea the
# integration tests run against.
gitea:
	./integration/build-gitea.sh

# git builds (once, cached outside the work tree; a few minutes, from
# Debian's copy of the upstream source) the git the fleet benchmark's
# Gitea runs: Gitea tests a pull request's mergeability with git
# merge-tree only from git 2.40 on, with a temporary clone before, and
# Debian bookworm has 2.39. Its build needs libcurl's and expat's headers
# (installed with apt-get when run as root).
git:
	./integration/build-git.sh

# gitea-frontend builds (once, cached outside the work tree; about a minute,
# from the npm registry) Gitea's JS and CSS, which its Go module lacks. Test
# Gitea instances serve it when it is there and empty stand-ins without it;
# the browser tests fail without it, so make test builds it first.
gitea-frontend:
	./integration/build-gitea-frontend.sh

# The ledger's tests run on PostgreSQL too when COLLAB_TEST_POSTGRES names
# a server (CONTRIBUTING.md); make passes it on from the environment, and
# .ci/run sets it. unit runs every package but integration/ (a few
# minutes, against a real Gitea where plugin/gitea's tests need one);
# e2e runs integration/, the whole path end to end against a real Gitea,
# OpenSSH and Chromium. They are separate steps, so a failure says which.
unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m $(SHORT_PKGS)

e2e:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 40m ./integration/...

# git: Gitea's merges and the sidecar's conflict test (plugin/gitea) need
# git 2.40 or later, which Debian bookworm does not have.
test: check gitea gitea-frontend git unit e2e

# demo starts a real Gitea with demo users and the sidecar, prints what to
# try, and runs until Ctrl-C. Without Gitea's frontend it runs unstyled.
demo: gitea
	@$(MAKE) --no-print-directory gitea-frontend >/dev/null || \
		echo "warning: building Gitea's frontend failed (above); the demo's pages will be unstyled" >&2
	CGO_ENABLED=1 $(GO) run ./integration/demo

# stress runs the linearizability, crash, Gitea outage and abuse suites.
# make test runs them too, at CI size; COLLAB_STRESS_SCALE=N makes each N
# times bigger (e.g. make stress COLLAB_STRESS_SCALE=10).
STRESS_TIMEOUT ?= 60m
stress: gitea
	CGO_ENABLED=1 $(GO) test -race -count=1 -v -timeout $(STRESS_TIMEOUT) \
		-run 'Linearizab|Crash|Outage|Hangs|Abuse' ./models/ ./integration/

# bench runs the benchmarks (ledger, and end to end against a real Gitea)
# in a few minutes, prints the summary and writes bench/RESULTS.md; see
# bench/README.md. BENCH_BASELINE=<rev> make bench adds a before/after part.
bench: gitea git
	GO=$(GO) ./bench/run.sh

# fleet runs the fleet benchmark (bench/fleet, about 20 minutes on 2
# cores): 20 agents drain backlogs in a real Gitea. Round two: a loop of
# real git collab processes each, 200 issues, with collab-lease, with
# Gitea's assignees alone, and with faults. Round three: one bot account,
# a 60-issue backlog with real pushes, pull requests and merges under git
# collab run (merging with git collab merge, and again holding a merge lock
# to compare), without sessions, with 3 frozen agents, and with assignees
# alone (one account, twenty); its bounds are sized from Gitea's speed,
# measured first. It prints what each cost; see bench/README.md. make bench runs
# it too. Flags go in FLEET_FLAGS, e.g. make fleet FLEET_FLAGS='-seed 7 -agents 10 -v'
# or FLEET_FLAGS='-modes sessions,zombies' for part of it.
FLEET_FLAGS ?=
fleet: gitea git
	CGO_ENABLED=1 $(GO) run ./bench/fleet $(FLEET_FLAGS)

# fuzz runs every fuzz target for FUZZTIME each (their seed corpora also
# run as plain tests in make test).
FUZZTIME ?= 30s
FUZZ_TARGETS := ./plugin/contract:FuzzParseCommand ./plugin/contract:FuzzParseDuration ./plugin/contract:FuzzSplitWords \
	./cmd/git-collab:FuzzParseRemoteURL ./cmd/git-collab:FuzzParseArgs ./cmd/collab-sidecar:FuzzConfig \
	./cmd/collab-gate-hook:FuzzReadRefs ./cmd/collab-gate-hook:FuzzPathSet ./cmd/collab-gate-hook:FuzzJSONLen \
	./plugin/gitea/branchglob:FuzzRuleName ./plugin/pathglob:FuzzOverlap
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
		CGO_ENABLED=1 $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

# install puts the binaries in $(PREFIX)/bin and git-collab's manual page
# in $(PREFIX)/share/man/man1, where man finds it through PATH (so
# `git collab --help` shows it): make install PREFIX=$$HOME/.local
PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(BIN)/collab-sidecar $(BIN)/collab-gate-hook $(BIN)/git-collab $(DESTDIR)$(PREFIX)/bin/
	$(BIN)/git-collab help --man > $(DESTDIR)$(PREFIX)/share/man/man1/git-collab.1
	chmod 644 $(DESTDIR)$(PREFIX)/share/man/man1/git-collab.1

clean:
	rm -rf $(BIN)
