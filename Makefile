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

bench:
	CGO_ENABLED=1 $(GO) test -run '^$$' -bench . -benchtime 2s ./models/

clean:
	rm -rf $(BIN)
