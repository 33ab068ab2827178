# A standalone broker image: binary protocol on 6650, HTTP (admin, lookup, /metrics) on 8080.
FROM python:3.11-slim

WORKDIR /opt/broker
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY managed_ledger ./managed_ledger
COPY metadata_store ./metadata_store
COPY compression_codecs ./compression_codecs
COPY conf ./conf
RUN pip install --no-cache-dir . && mkdir -p /data

EXPOSE 6650 8080
VOLUME ["/data"]
# Set --advertised-address to the host name clients use to reach the container.
ENTRYPOINT ["python", "-m", "broker", "standalone", "--config", "/opt/broker/conf/standalone.conf", "--data-dir", "/data"]
