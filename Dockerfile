# The image deploy/base runs. Build: docker build -t gateway-leader .
# tests/deploy_manifests.rs checks that the binary path, the user and the port here agree with
# deploy/base/deployment.yaml.

# Bookworm on both sides: the binary links the glibc it was built against.
FROM rust:1-bookworm AS build
# protoc: etcd-client compiles etcd's protobuf definitions at build time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin gateway-leader

# glibc, libgcc and CA certificates (https etcd endpoints and rediss:// URLs without a CA file use
# the system roots), no shell, no package manager; the nonroot variant's user is 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/gateway-leader /usr/local/bin/gateway-leader
USER 65532:65532
# /metrics, /healthz and /readyz (the Service's and the probes' port `metrics`).
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/gateway-leader"]
CMD ["run"]
