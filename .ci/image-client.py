"""A client of `atomflake serve` running in the image: HTTP with `urllib`, gRPC with grpcio
and stubs generated from the proto (test-servers/python/serve_stubs.py).

Usage: image-client.py ADDRESS PROTO_ROOT STUB_DIR NODE [AFTER]

Checks that `/livez` and `/readyz` answer 200, gRPC health says SERVING, and that IDs from
`GET /v1/ids` and `GetIds` are distinct, decode to NODE (the server's `Decode` and
`GET /v1/ids/{id}`) and, given AFTER, are all greater than it. Prints the greatest ID.
"""

import json
import os
import sys
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

address, proto_root, stubs, node = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
after = int(sys.argv[5]) if len(sys.argv) > 5 else None
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test-servers", "python"))
import serve_stubs  # noqa: E402

ids_pb2, ids_pb2_grpc = serve_stubs.generate(proto_root, stubs)


def get(path):
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as answer:
        return answer.status, answer.read().decode()


for path, body in (("/livez", "alive"), ("/readyz", "serving")):
    status, text = get(path)
    assert (status, text.strip()) == (200, body), (path, status, text)

status, text = get("/v1/ids?count=100")
assert status == 200, text
ids = [int(id) for id in json.loads(text)["ids"]]
assert len(ids) == 100, text

channel = grpc.insecure_channel(address)
health = health_pb2_grpc.HealthStub(channel).Check(
    health_pb2.HealthCheckRequest(service="atomflake.v1.Ids"), timeout=10
)
assert health.status == health_pb2.HealthCheckResponse.SERVING, health
stub = ids_pb2_grpc.IdsStub(channel)
ids += list(stub.GetIds(ids_pb2.GetIdsRequest(count=100), timeout=10).ids)

assert len(set(ids)) == len(ids) == 200, f"{len(ids) - len(set(ids))} IDs came twice"
for id in (ids[0], ids[-1]):
    assert stub.Decode(ids_pb2.DecodeRequest(id=id), timeout=10).node == node, id
    status, text = get(f"/v1/ids/{id}")
    assert json.loads(text)["node"] == node, text
if after is not None:
    assert min(ids) > after, f"ID {min(ids)} is not past {after}, the first run's last"
print(max(ids))
