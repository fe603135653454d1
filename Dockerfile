# turnstile in a container: the bot, bubblewrap for the agent's sandbox and
# the Claude Code CLI, run as a non-root user with the state in a volume and
# the token from a secret file. Build and run: README, "Container".
#
#   docker build -t turnstile .
#
# The base images, as build arguments so a build without Docker Hub can
# name local ones (scripts/container-smoke.sh does).
ARG DEBIAN=debian:bookworm-slim
ARG RUST=rust:1.95-slim-bookworm
# The stage the binary comes from: "build" compiles it here; the smoke test
# passes an image that holds a binary built outside, at the same path.
ARG BINARY_FROM=build

FROM ${RUST} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin turnstile \
 && install -D -m 0755 target/release/turnstile /out/turnstile

FROM ${BINARY_FROM} AS binary

FROM ${DEBIAN}
# bubblewrap: agent.sandbox = "bubblewrap" (the default). nodejs and npm:
# the Claude Code CLI, at the version scripts/install-claude.sh pins (a
# native binary), and MCP servers the operator may start with npx.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap ca-certificates nodejs npm \
 && rm -rf /var/lib/apt/lists/*
COPY scripts/install-claude.sh /usr/local/share/turnstile/install-claude.sh
# NODE_EXTRA_CA_CERTS: npm trusts the system's CAs too, a local one included.
# npm 9 installs the CLI's musl build beside the glibc one (it does not tell
# the two apart); this image is glibc, so the musl one goes.
RUN NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt npm install --global --no-audit --no-fund --loglevel=error \
      "@anthropic-ai/claude-code@$(bash /usr/local/share/turnstile/install-claude.sh --version)" \
 && rm -rf /root/.npm \
 && rm -rf /usr/local/lib/node_modules/@anthropic-ai/claude-code/node_modules/@anthropic-ai/claude-code-linux-x64-musl
RUN useradd --uid 10001 --user-group --home-dir /var/lib/turnstile \
      --create-home --shell /usr/sbin/nologin turnstile \
 && chmod 0700 /var/lib/turnstile
COPY --from=binary /out/turnstile /usr/local/bin/turnstile
COPY config.example.toml /etc/turnstile/turnstile.toml

# The state file (state.path, relative to this directory), the chats'
# workdirs and the agents' homes: keep it on a volume and back it up.
WORKDIR /var/lib/turnstile
VOLUME /var/lib/turnstile
# The token is read from $CREDENTIALS_DIRECTORY/telegram-bot-token when
# TELEGRAM_BOT_TOKEN is unset: a Docker or Compose secret named
# telegram-bot-token lands there. The agent's sandbox hides that directory.
ENV CREDENTIALS_DIRECTORY=/run/secrets
# The health check asks GET /healthz on ops.listen (the image has no curl:
# `turnstile healthcheck` does the request, exit 0 when ok). On loopback
# inside the container by default; a config or -e TURNSTILE_OPS_LISTEN that
# moves it is followed, since the check reads the same configuration.
ENV TURNSTILE_OPS_LISTEN=127.0.0.1:9464
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD ["/usr/local/bin/turnstile", "healthcheck", "--config", "/etc/turnstile/turnstile.toml"]
USER turnstile
ENTRYPOINT ["/usr/local/bin/turnstile"]
CMD ["--config", "/etc/turnstile/turnstile.toml"]
