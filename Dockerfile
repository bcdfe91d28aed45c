# presence-sweeper container image: build with cargo, run as a non-root user on a slim Debian.
#   docker build -t presence-sweeper --build-arg PRESENCE_SWEEPER_GIT_REVISION=$(git rev-parse --short=12 HEAD) .
#   docker run --rm -p 9750:9750 -e PRESENCE_SWEEPER__REDIS__URL=redis://redis:6379/0 presence-sweeper

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependencies first, against stub sources: this layer stays cached until the manifests change.
# Only the daemon's binary is built: the image runs nothing else (`presence-sweeper-tools`, from
# crates/tools, writes synthetic data for demos and benchmarks; `cargo install` has it).
COPY Cargo.toml Cargo.lock ./
COPY crates/cli/Cargo.toml crates/cli/
COPY crates/config/Cargo.toml crates/config/
COPY crates/redis/Cargo.toml crates/redis/
COPY crates/rules/Cargo.toml crates/rules/
COPY crates/tools/Cargo.toml crates/tools/
COPY crates/webhooks/Cargo.toml crates/webhooks/
# A manifest that names a bench target (crates/rules: the index's) needs its file to parse.
RUN for crate in . crates/*; do \
      mkdir -p "$crate/src" && echo 'fn main() {}' > "$crate/src/main.rs" && touch "$crate/src/lib.rs"; \
    done \
 && echo 'fn main() {}' | tee crates/cli/build.rs > crates/config/build.rs \
 && mkdir -p crates/rules/benches && echo 'fn main() {}' > crates/rules/benches/index.rs \
 && cargo build --locked --release --bin presence-sweeper \
 && rm -rf src crates/*/src crates/*/build.rs crates/rules/benches
COPY src ./src
COPY crates ./crates
COPY config ./config
# .git is not in the build context: the revision for `--version` and `build_info` comes from here,
# e.g. --build-arg PRESENCE_SWEEPER_GIT_REVISION=$(git rev-parse --short=12 HEAD); else "unknown".
ARG PRESENCE_SWEEPER_GIT_REVISION
# Newer mtimes than the stub build's, so cargo rebuilds our crates (and only them).
RUN find src crates -name '*.rs' -exec touch {} + \
 && cargo build --locked --release --bin presence-sweeper

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/presence-sweeper /usr/local/bin/presence-sweeper
COPY config/presence-sweeper.toml /etc/presence-sweeper/presence-sweeper.toml
ENV PRESENCE_SWEEPER_CONFIG=/etc/presence-sweeper/presence-sweeper.toml \
    PRESENCE_SWEEPER__LOG__FORMAT=json
USER 10001:10001
EXPOSE 9750
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/presence-sweeper", "healthcheck"]
# Exec form: the daemon is PID 1 and receives SIGTERM itself.
ENTRYPOINT ["/usr/local/bin/presence-sweeper"]
CMD ["run"]
