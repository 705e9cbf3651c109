"""A client of `atomflake serve` written against its public API only: HTTP with
`requests`, gRPC with stubs that `grpcio-tools` generates from the proto, and the
OpenAPI document checked by `openapi-spec-validator`, its answers by `jsonschema`.

Usage: serve_client.py ADDRESS PROTO_ROOT STUB_DIR MAX_COUNT

Checks the answers (errors included) and prints every ID it received, one per line, for
the test to check for duplicates and decode.
"""

import sys
import uuid

import grpc
import jsonschema
import requests
from openapi_spec_validator import validate as validate_openapi
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
import serve_stubs

address, proto_root, stubs, max_count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ids_pb2, ids_pb2_grpc = serve_stubs.generate(proto_root, stubs)

ids = []

# HTTP
base = f"http://{address}"
answer = requests.get(f"{base}/v1/ids", params={"count": 50}, timeout=10)
assert answer.status_code == 200, answer.text
assert answer.headers["content-type"] == "application/json"
ids += [int(text) for text in answer.json()["ids"]]
answer = requests.get(f"{base}/v1/ids", params={"count": max_count + 1}, timeout=10)
assert answer.status_code == 400, answer.text
assert answer.json() == {
    "error": f"count {max_count + 1} is out of range: allowed 1..={max_count}"
}, answer.text
assert requests.get(f"{base}/healthz", timeout=10).status_code == 200

# The OpenAPI document is valid, and the answers are what it says.
spec = requests.get(f"{base}/v1/openapi.json", timeout=10).json()
validate_openapi(spec)
count_schema = spec["paths"]["/v1/ids"]["get"]["parameters"][0]["schema"]
assert count_schema["maximum"] == max_count, count_schema
assert spec["components"]["schemas"]["Id"]["type"] == "string", spec["components"]


def conforms(instance, name):
    schema = {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    jsonschema.Draft202012Validator(schema).validate(instance)


conforms(requests.get(f"{base}/v1/ids", params={"count": 3}, timeout=10).json(), "Ids")
conforms(answer.json(), "Error")
conforms(requests.get(f"{base}/v1/ids/{ids[0]}", timeout=10).json(), "Decoded")
conforms(requests.get(f"{base}/v1/layout", timeout=10).json(), "Layout")
# UUIDs of version 7, as Python's uuid module reads them: their time is the ID's, and the
# server decodes each back to the ID.
uuids = requests.get(f"{base}/v1/ids", params={"count": 3, "as": "uuid"}, timeout=10).json()
conforms(uuids, "Uuids")
uuid_ids = []
for text in uuids["ids"]:
    value = uuid.UUID(text)
    assert value.version == 7 and value.variant == uuid.RFC_4122, text
    decoded = requests.get(f"{base}/v1/ids/{value.hex}", timeout=10).json()
    conforms(decoded, "Decoded")
    assert value.int >> 80 == decoded["unix_ms"], (text, decoded)
    uuid_ids.append(int(decoded["id"]))
assert uuid_ids == sorted(uuid_ids) and uuid_ids[0] > ids[-1], (uuid_ids, ids[-1])
ids += uuid_ids
try:
    conforms({"ids": [ids[0]]}, "Ids")
    raise AssertionError("an ID as a JSON number conforms to the document")
except jsonschema.ValidationError:
    pass

# gRPC
channel = grpc.insecure_channel(address)
stub = ids_pb2_grpc.IdsStub(channel)
ids += list(stub.GetIds(ids_pb2.GetIdsRequest(count=7)).ids)
try:
    stub.GetIds(ids_pb2.GetIdsRequest(count=0))
    raise AssertionError("GetIds(count=0) was answered")
except grpc.RpcError as error:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert error.details() == f"count 0 is out of range: allowed 1..={max_count}", error.details()
for message in stub.StreamIds(ids_pb2.StreamIdsRequest(count=100_000)):
    for run in message.runs:
        ids += [run.first + index * run.step for index in range(run.count)]
# Compression, negotiated per call: this channel sends its requests in gzip and takes gzip
# answers (grpcio says so in grpc-accept-encoding), the server's of a KiB and more.
zipped = grpc.insecure_channel(address, compression=grpc.Compression.Gzip)
zipped_stub = ids_pb2_grpc.IdsStub(zipped)
ids += list(zipped_stub.GetIds(ids_pb2.GetIdsRequest(count=max_count)).ids)
for message in zipped_stub.StreamIds(ids_pb2.StreamIdsRequest(count=10_000)):
    for run in message.runs:
        ids += [run.first + index * run.step for index in range(run.count)]
zipped.close()
layout = stub.GetLayout(ids_pb2.GetLayoutRequest())
decoded = stub.Decode(ids_pb2.DecodeRequest(id=ids[-1]))
assert decoded.node in layout.nodes, (decoded, layout)
assert decoded.id == ids[-1], decoded
by_uuid = stub.Decode(ids_pb2.DecodeRequest(uuid=uuids["ids"][0]))
assert by_uuid.id == uuid_ids[0], (by_uuid, uuid_ids)
assert uuid.UUID(uuids["ids"][0]).int >> 80 == by_uuid.unix_ms, by_uuid
node_mask = (1 << layout.layout.node_bits) - 1
assert (ids[-1] >> layout.layout.node_shift) & node_mask == decoded.node, (ids[-1], layout)
health = health_pb2_grpc.HealthStub(channel).Check(
    health_pb2.HealthCheckRequest(service="atomflake.v1.Ids")
)
assert health.status == health_pb2.HealthCheckResponse.SERVING, health
# Request messages are capped at 1 KiB in every service, health and reflection included
# (tonic refuses a larger one with OUT_OF_RANGE).
def exhausted(call, what):
    try:
        call()
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.OUT_OF_RANGE, (what, error)
        assert error.details().endswith("the limit is: 1024 bytes"), (what, error)
        return
    raise AssertionError(f"{what} was read")


exhausted(
    lambda: health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service="x" * 2048)
    ),
    "a 2 KiB health check",
)


def reflect(symbol):
    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    return list(stub.ServerReflectionInfo(iter([request])))


# A reflection stream whose request is over the cap ends with no answer; one under it is
# read (here: the symbol is not found).
try:
    reflect("x" * 512)
    raise AssertionError("a symbol of 512 x found")
except grpc.RpcError as error:
    assert error.code() == grpc.StatusCode.NOT_FOUND, error
assert reflect("x" * 2048) == [], "a 2 KiB reflection request was answered"
services = ProtoReflectionDescriptorDatabase(channel).get_services()
assert "atomflake.v1.Ids" in services, services

print("\n".join(str(id) for id in ids))
