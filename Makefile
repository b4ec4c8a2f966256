# make test is what CI runs (.ci/run calls it on a clean clone).
GO      ?= go
PKGS    := ./...
BIN     := bin

.PHONY: all build test fmt-check vet unit gitea bench fuzz demo clean

all: build

build:
	CGO_ENABLED=1 $(GO) build -o $(BIN)/ ./cmd/...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# gitea builds (once, cached outside the work tree) the real Gitea the
# integration tests run against.
gitea:
	./integration/build-gitea.sh

unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 $(PKGS)

test: fmt-check vet gitea unit

# demo starts a real Gitea with demo users and the sidecar, prints what to
# try, and runs until Ctrl-C.
demo: gitea
	CGO_ENABLED=1 $(GO) run ./integration/demo

bench: gitea
	CGO_ENABLED=1 $(GO) test -run '^$$' -bench . -benchtime 2s ./models/
	CGO_ENABLED=1 $(GO) test -run '^$$' -bench SSHFresh -benchtime 50x ./integration/

clean:
	rm -rf $(BIN)
