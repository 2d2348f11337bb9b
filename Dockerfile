# packd container image: the gRPC planning server and the packctl CLI.
#
# Two stages on Debian 12 (bookworm-slim):
#   build    compiles the repository with CMake (service only: no GPU agent,
#            no tests, no benchmarks) and strips the two binaries;
#   runtime  holds only the shared libraries they need, runs as the non-root
#            user 65532 and is configured with PACKD_* environment variables.
#
# Build:  docker build -t packd:0.1.0 .          (or: podman build --format docker ...)
# Run:    docker run --rm -p 127.0.0.1:50051:50051 -p 127.0.0.1:9464:9464 packd:0.1.0
# docs/deploy.md has every way to run it; scripts/verify-image.sh builds and
# checks this file with podman.

FROM debian:bookworm-slim AS build
ARG BUILD_JOBS=2
# The build dependencies of the service (the same Debian packages as
# scripts/bootstrap.sh, less the test and GPU tools).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config \
      libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libuv1-dev \
      libxxhash-dev libjansson-dev libhttp-parser-dev libhiredis-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# .dockerignore lets only the sources of the service into the context.
COPY . .
# RelWithDebInfo is the build type the tests run (-O2); the symbols are
# stripped below.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPK_BUILD_GPU=OFF -DPK_BUILD_TESTS=OFF -DPK_BUILD_BENCH=OFF \
 && cmake --build /build -j "${BUILD_JOBS}" \
 && mkdir -p /out \
 && cp /build/server/packd /build/client/c/packctl /out/ \
 && strip --strip-unneeded /out/packd /out/packctl

FROM debian:bookworm-slim AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="packd" \
      org.opencontainers.image.description="Sequence-packing planner for LLM RL and long-context training (gRPC)" \
      org.opencontainers.image.version="${VERSION}"
# Runtime libraries only: gRPC core, protobuf-c, libuv, jansson, xxhash,
# http-parser, hiredis (the plan store client, --plan-store) and OpenSSL's
# libcrypto (TLS file checks, token digests, keyed plan ids). The user
# gets a fixed numeric id so that Kubernetes can check runAsNonRoot without
# reading /etc/passwd.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc29 libprotobuf-c1 libuv1 libjansson4 libxxhash0 libhttp-parser2.9 libhiredis0.14 \
      libssl3 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
      /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 65532 packd \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin packd
COPY --from=build /out/packd /out/packctl /usr/local/bin/
COPY deploy/docker/packd-healthcheck /usr/local/bin/packd-healthcheck
# Fail the build now, not at first start, if a shared library is missing.
RUN if ldd /usr/local/bin/packd /usr/local/bin/packctl | grep -F "not found"; then exit 1; fi

# In a container the server listens on every interface; publish the ports on
# 127.0.0.1 (docker run -p 127.0.0.1:...) when the host should keep them local.
ENV PACKD_LISTEN=0.0.0.0:50051 \
    PACKD_METRICS_LISTEN=0.0.0.0:9464 \
    PACKD_LOG_LEVEL=info
EXPOSE 50051/tcp 9464/tcp
USER 65532:65532
# SIGTERM starts the drain: health turns NOT_SERVING, the listener closes
# after PACKD_DRAIN_DELAY (default 1 s), calls in flight get
# PACKD_GRACE_PERIOD (default 10 s), and the process exits 0. Give the
# runtime a stop timeout above the sum (docker stop -t, compose
# stop_grace_period, Kubernetes terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
# The health check asks the standard grpc.health.v1 service on the port of
# PACKD_LISTEN (deploy/docker/packd-healthcheck runs packctl health).
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD ["/usr/local/bin/packd-healthcheck"]
ENTRYPOINT ["/usr/local/bin/packd"]
