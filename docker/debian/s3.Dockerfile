# An S3 endpoint in MinIO's place: moto's server at the version constraints.txt pins, on port 9000.
ARG BASE_IMAGE=tiering-debian:bookworm
FROM ${BASE_IMAGE}
RUN python3 -m venv /opt/s3
COPY constraints.txt /tmp/constraints.txt
RUN /opt/s3/bin/pip install --no-cache-dir --disable-pip-version-check -c /tmp/constraints.txt "moto[server]" \
    && useradd --system --user-group s3
USER s3
EXPOSE 9000
ENTRYPOINT ["/opt/s3/bin/moto_server"]
CMD ["--host", "0.0.0.0", "--port", "9000"]
