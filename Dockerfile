# The image deploy/base and the Helm chart run. Build, with the binary's version as the label (the
# build stage checks that they agree):
#   docker build --build-arg VERSION=0.1.0 -t gateway-leader:0.1.0 .
# Where no base image can be pulled, scripts/image.sh builds this same file on local Debian bases
# (BUILD_IMAGE and RUNTIME_IMAGE) and runs the image against a test kube-apiserver
# (docs/operations.md, "The image"). tests/deploy_manifests.rs checks that the binary path, the
# user and the port here agree with deploy/base/deployment.yaml.

# Bookworm on both sides: the binary links the glibc it was built against.
ARG BUILD_IMAGE=docker.io/library/rust:1-bookworm
# glibc, libgcc and CA certificates (https etcd endpoints and rediss:// URLs without a CA file use
# the system roots), no shell, no package manager; the nonroot variant's user is 65532.
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
ARG VERSION
# protoc: etcd-client compiles etcd's protobuf definitions at build time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin gateway-leader \
    && said="$(target/release/gateway-leader --version)" \
    && if [ "$said" != "gateway-leader ${VERSION}" ]; then \
         echo "--build-arg VERSION=${VERSION} is not the binary's: it says \"$said\"" >&2; \
         exit 1; \
       fi

FROM ${RUNTIME_IMAGE}
ARG VERSION
LABEL org.opencontainers.image.title="gateway-leader" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /src/target/release/gateway-leader /usr/local/bin/gateway-leader
USER 65532:65532
# /metrics, /healthz and /readyz (the Service's and the probes' port `metrics`).
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/gateway-leader"]
CMD ["run"]
