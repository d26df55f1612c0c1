# The trawl image: one binary for every stage (k8s/ runs it with a different subcommand per
# workload). Build: docker build -t ghcr.io/trawl-dev/trawl:0.1.0 .
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config libssl-dev zlib1g-dev cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p trawl-cli && cp target/release/trawl /trawl

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 git \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --create-home trawl
COPY --from=build /trawl /usr/local/bin/trawl
USER 10001
ENTRYPOINT ["/usr/local/bin/trawl"]
