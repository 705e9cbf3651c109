"""One long `StreamIds` call to `atomflake serve`, with stubs that `grpcio-tools`
generates from the proto.

Usage: serve_stream.py ADDRESS PROTO_ROOT STUB_DIR COUNT

Prints `streaming` once the first message is in, then reads the whole stream, checking
that the runs increase. Prints `received N` and exits 0 when the stream ends well, or
prints `ended CODE after N` and exits 1 when it ends with an error.
"""

import sys

import grpc
import serve_stubs

address, proto_root, stubs, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ids_pb2, ids_pb2_grpc = serve_stubs.generate(proto_root, stubs)

stub = ids_pb2_grpc.IdsStub(grpc.insecure_channel(address))
received = 0
last = -1
try:
    for message in stub.StreamIds(ids_pb2.StreamIdsRequest(count=count)):
        if received == 0:
            print("streaming", flush=True)
        for run in message.runs:
            assert run.first > last, f"run at {run.first} after {last}"
            last = run.first + (run.count - 1) * run.step
            received += run.count
except grpc.RpcError as error:
    print(f"ended {error.code().name} after {received}", flush=True)
    sys.exit(1)
print(f"received {received}", flush=True)
