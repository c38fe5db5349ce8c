# The image the manifests in deploy/kubernetes run. Build: docker build -t gateway-leader .
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin gateway-leader

FROM debian:bookworm-slim
# ca-certificates: https etcd endpoints and rediss:// URLs without a CA file use the system roots.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/gateway-leader /usr/local/bin/gateway-leader
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gateway-leader"]
CMD ["run"]
