# syntax=docker/dockerfile:1
# The kube-bpf-proxy agent image. The build stage runs the same install and build scripts as CI
# (scripts/install-deps.sh, npm run build), so what CI tests is what the image ships.

FROM node:20-bookworm AS build
WORKDIR /src
# helm only serves the chart tests, which do not run here (and this image has no Go to build it).
ENV KBP_SKIP_HELM=1
COPY package.json package-lock.json ./
COPY scripts/ scripts/
RUN bash scripts/install-deps.sh
COPY . .
RUN npm run build \
 && npm prune --omit=dev

FROM debian:bookworm-slim AS runtime
# libbpf1: loaded through koffi; iptables, nftables, ipset, ipvsadm, conntrack, iproute2, kmod: the
# tools the data planes and `cleanup` drive; mount: the mount-bpffs init container of the Helm chart.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates conntrack iproute2 ipset iptables ipvsadm kmod libbpf1 libstdc++6 mount nftables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/node /usr/local/bin/node
WORKDIR /opt/kube-bpf-proxy
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY --from=build /src/bpf/*.o ./bpf/
# `kubectl exec ... -- kube-bpf-proxy <command>` finds the CLI on PATH.
RUN printf '#!/bin/sh\nexec node /opt/kube-bpf-proxy/dist/src/cli/main.js "$@"\n' >/usr/local/bin/kube-bpf-proxy \
 && chmod 0755 /usr/local/bin/kube-bpf-proxy \
 && node --version
ENV NODE_ENV=production
LABEL org.opencontainers.image.title="kube-bpf-proxy" \
      org.opencontainers.image.description="A drop-in replacement for kube-proxy with an eBPF data plane" \
      org.opencontainers.image.licenses="Apache-2.0"
# Root: bpffs, /run/xtables.lock and the capabilities the chart grants all belong to uid 0.
ENTRYPOINT ["node", "/opt/kube-bpf-proxy/dist/src/cli/main.js"]
