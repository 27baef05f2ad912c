"""The scripts the deployment test runs inside the stack's containers, by their own Python on the
stack's network (``Deployment.python``), and the topic they write and read."""

from __future__ import annotations

TOPIC = "orders"
#: 64 KiB segments, 1 MiB per partition: 15 closed segments each.
SEGMENT_BYTES = 64 * 1024
RECORDS = 2048
VALUE_BYTES = 480
BUCKET = "kafka-tiered"


PRODUCE = f"""
import json
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
admin = KafkaAdminClient(bootstrap_servers="kafka-1:9092")
configs = {{"internal.segment.bytes": "{SEGMENT_BYTES}", "min.insync.replicas": "2"}}
admin.create_topics([NewTopic({TOPIC!r}, replica_assignments={{0: [1, 2], 1: [2, 1]}}, topic_configs=configs)])
import time
deadline = time.monotonic() + 60
while True:  # each partition led by its first replica: 0 by broker 1, 1 by broker 2
    described = admin.describe_topics([{TOPIC!r}])[0]
    leaders = {{p["partition_index"]: p["leader_id"] for p in described["partitions"]}}
    if leaders == {{0: 1, 1: 2}}:
        break
    assert time.monotonic() < deadline, leaders
    time.sleep(0.5)
producer = KafkaProducer(bootstrap_servers="kafka-1:9092", acks="all", linger_ms=5)
for partition in (0, 1):
    for i in range({RECORDS}):
        value = json.dumps({{"order": i, "partition": partition, "note": "x" * {VALUE_BYTES}}}).encode()
        producer.send({TOPIC!r}, key=str(i).encode(), value=value, partition=partition)
producer.flush()
producer.close()
print(json.dumps({{"topic_id": str(admin.describe_topics([{TOPIC!r}])[0].get("topic_id", ""))}}))
"""

DELETE_TOPIC = f"""
from kafka.admin import KafkaAdminClient
KafkaAdminClient(bootstrap_servers="kafka-1:9092").delete_topics([{TOPIC!r}])
"""

S3_KEYS = f"""
import boto3, json
s3 = boto3.client("s3", endpoint_url="http://localhost:9000", region_name="us-east-1",
                  aws_access_key_id="probe", aws_secret_access_key="probe")
try:
    s3.head_bucket(Bucket={BUCKET!r})
except Exception:
    s3.create_bucket(Bucket={BUCKET!r})
pages = s3.get_paginator("list_objects_v2").paginate(Bucket={BUCKET!r})
keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
print(json.dumps(keys))
"""


EXPORTED = f"""
import json, os
from tiering_core.config import load_config
from tiering_core.export.table import load_catalog, table_name
# The platform's S3 user, as the Spark DAGs have it (the aws_default connection).
connection = json.loads(os.environ["AIRFLOW_CONN_AWS_DEFAULT"])
os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = connection["login"], connection["password"]
config = load_config(os.environ["TIERING_CONFIG"])
table = load_catalog(config).load_table(table_name(config.export, {TOPIC!r}).identifier)
found = {{}}
for row in table.scan(selected_fields=("partition", "offset", "value")).to_arrow().to_pylist():
    record = json.loads(row["value"])
    seen = found.setdefault(row["partition"], {{"offsets": set(), "rows": 0, "unlike": 0}})
    seen["offsets"].add(row["offset"])
    seen["rows"] += 1
    seen["unlike"] += [record["order"], record["partition"]] != [row["offset"], row["partition"]]
print(json.dumps({{
    p: {{"rows": s["rows"], "offsets": len(s["offsets"]), "first": min(s["offsets"]), "last": max(s["offsets"]),
         "unlike": s["unlike"], "location": table.location()}}
    for p, s in found.items()
}}))
"""


ROLES = """
import json, os
from sqlalchemy import create_engine, text
from tiering_core.config import load_config
urls = {"metadata store": load_config(os.environ["TIERING_CONFIG"]).metadata.url}
for name in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CELERY__RESULT_BACKEND"):
    if name in os.environ:
        urls[name] = os.environ[name].removeprefix("db+")
found = {}
for what, url in urls.items():
    engine = create_engine(url)
    with engine.connect() as conn:
        query = "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
        found[what] = list(conn.execute(text(query)).one())
    engine.dispose()
    other = "airflow" if engine.url.database == "tiering" else "tiering"
    try:  # another role's database
        engine = create_engine(engine.url.set(database=other))
        with engine.connect():
            found[what + " elsewhere"] = "connected"
    except Exception as exc:
        found[what + " elsewhere"] = "refused" if "permission denied for database" in str(exc) else str(exc)
    engine.dispose()
print(json.dumps(found))
"""


def http_get(url: str, headers: dict[str, str] | None = None) -> str:
    return f"""
import urllib.request, urllib.error
req = urllib.request.Request({url!r}, headers={headers or {}!r})
try:
    with urllib.request.urlopen(req, timeout=20) as resp:
        print(resp.status); print(resp.read().decode())
except urllib.error.HTTPError as exc:
    print(exc.code); print(exc.read().decode())
"""
