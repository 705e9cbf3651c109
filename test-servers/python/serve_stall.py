"""A `StreamIds` client of `atomflake serve` that stops reading without cancelling, with
stubs that `grpcio-tools` generates from the proto.

Usage: serve_stall.py ADDRESS PROTO_ROOT STUB_DIR COUNT

Asks for COUNT IDs over a channel whose HTTP/2 windows stay small (so that a client that
reads nothing fills them soon), reads one message, prints `streaming`, then reads nothing
until a line comes on stdin. Then it reads the rest, checking that the runs increase, and
prints how the stream ended: `ended CODE after N: MESSAGE`, or `received N` if it ended
well.
"""

import sys

import grpc
import serve_stubs

address, proto_root, stubs, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ids_pb2, ids_pb2_grpc = serve_stubs.generate(proto_root, stubs)

# A small first window, and no growth of it by bandwidth probes.
options = [("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]
stub = ids_pb2_grpc.IdsStub(grpc.insecure_channel(address, options=options))
received = 0
last = -1
first = True
try:
    for message in stub.StreamIds(ids_pb2.StreamIdsRequest(count=count)):
        for run in message.runs:
            assert run.first > last, f"run at {run.first} after {last}"
            last = run.first + (run.count - 1) * run.step
            received += run.count
        if first:
            first = False
            print("streaming", flush=True)
            sys.stdin.readline()
except grpc.RpcError as error:
    print(f"ended {error.code().name} after {received}: {error.details()}", flush=True)
    sys.exit(0)
print(f"received {received}", flush=True)
