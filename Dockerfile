# The `atomflake` command as an image, for `atomflake serve`:
#
#   deploy/image/stage && docker build -t atomflake .
#   docker run --rm atomflake mint -n 5
#   docker run --rm -p 8080:8080 -v atomflake:/var/lib/atomflake atomflake serve --node 1 --listen 0.0.0.0:8080
#
# FROM scratch, so that nothing is pulled from a registry: deploy/image/stage puts the
# release binary, the libraries it links and the CA certificates in target/image/ (the
# only part of the repository .dockerignore sends). No shell, no package manager.
FROM scratch

COPY target/image/rootfs/ /
# The high-water files of fixed nodes (--node, --statefulset): a volume the user owns, so
# that a container restarted on its node with its clock behind starts past every ID the
# node handed out.
COPY --chown=10001:10001 target/image/state/ /var/lib/atomflake/
ENV ATOMFLAKE_HIGH_WATER=/var/lib/atomflake
VOLUME ["/var/lib/atomflake"]

USER 10001:10001
# HTTP/JSON, gRPC, health (/livez, /readyz) and /metrics, on `serve --listen 0.0.0.0:8080`.
EXPOSE 8080
# SIGTERM (docker stop, Kubernetes) drains the requests under way for --drain seconds (10
# unless set) and exits 0.
STOPSIGNAL SIGTERM

LABEL org.opencontainers.image.title="atomflake" \
      org.opencontainers.image.description="Snowflake-style 64-bit IDs: the atomflake command, and atomflake serve over HTTP/JSON and gRPC" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.source="https://crates.io/crates/atomflake-cli" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0"

ENTRYPOINT ["/usr/local/bin/atomflake"]
CMD ["--help"]
