# collab-sidecar: build with CGO (SQLite), run as a non-root user.
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" -t collab-sidecar .
#   docker run -v collab-data:/data -p 2222:2222 -p 8787:8787 \
#     -e COLLAB_GITEA_URL=https://git.example.com \
#     -e COLLAB_GITEA_TOKEN_FILE=/run/secrets/gitea-token collab-sidecar
# /metrics and /readyz listen on the container's loopback (COLLAB_ADMIN_LISTEN,
# 127.0.0.1:8788), out of reach; to scrape them, set COLLAB_ADMIN_LISTEN=:8788
# and publish it to your monitoring only (e.g. -p 127.0.0.1:8788:8788), never
# beside 8787. The HEALTHCHECK asks /healthz on the public port.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The build context has no .git, so the go command cannot stamp a commit:
# VERSION names the build instead (--version, the start log line and the
# collab_lease_build_info metric show it).
ARG VERSION=
# collab-gate-hook is the gate's hook program: the sidecar copies it from
# beside itself into Gitea's repository root, where Gitea runs it, so it is
# static (CGO_ENABLED=0).
RUN CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/collab-sidecar ./cmd/collab-sidecar \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/collab-gate-hook ./cmd/collab-gate-hook \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/git-collab ./cmd/git-collab

FROM debian:bookworm-slim
# git: the conflict test of merges through the sidecar runs git merge-tree
# (2.38 or later; bookworm has 2.39) in Gitea's repository directory,
# when the repositories' volume is mounted (--gitea-repo-root).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin collab \
 && mkdir -p /data \
 && chown collab:collab /data \
 && chmod 700 /data
COPY --from=build /out/collab-sidecar /out/collab-gate-hook /out/git-collab /usr/local/bin/
USER collab
ENV COLLAB_DATA_DIR=/data \
    COLLAB_SSH_LISTEN=:2222 \
    COLLAB_HTTP_LISTEN=:8787
VOLUME /data
EXPOSE 2222 8787
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/collab-sidecar", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/collab-sidecar"]
CMD ["serve"]
