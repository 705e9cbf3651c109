"""`GetIds` calls to `atomflake serve` on one grpcio channel kept throughout, from one or
more threads, with stubs that `grpcio-tools` generates from the proto: how the channel's
connection ends and whether it comes back.

Usage: serve_long_channel.py ADDRESS PROTO_ROOT STUB_DIR SECONDS THREADS PAUSE [CA CERT KEY]

Generates the stubs, prints `ready` and waits for a line on stdin (the certificate files
may be written meanwhile). Then opens one channel, over TLS with the client certificate
CERT and its KEY when CA is given (plain HTTP/2 otherwise), and THREADS threads each call
`GetIds(count=1)` on it in a loop, PAUSE seconds apart, for SECONDS. Prints, each on a
line as it happens:

- `state MS STATE`: the channel's connectivity changed to STATE (`READY`, `IDLE`,
  `CONNECTING`, `TRANSIENT_FAILURE`) at Unix time MS (milliseconds);
- `call START END RESULT READIES`: a call from START to END (Unix ms) ended with RESULT,
  `ok` or its status code's name, when the channel had been READY READIES times;

then `done`.
"""

import sys
import threading
import time

import grpc
import serve_stubs

address, proto_root, stubs = sys.argv[1:4]
seconds, threads, pause = float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
tls = sys.argv[7:10]
ids_pb2, ids_pb2_grpc = serve_stubs.generate(proto_root, stubs)
print("ready", flush=True)
sys.stdin.readline()

lock = threading.Lock()
readies = 0


def now_ms():
    return int(time.time() * 1000)


def say(line):
    with lock:
        print(line, flush=True)


def seen(state):
    global readies
    with lock:
        if state == grpc.ChannelConnectivity.READY:
            readies += 1
        print(f"state {now_ms()} {state.name}", flush=True)


def read(path):
    with open(path, "rb") as file:
        return file.read()


if tls:
    ca, cert, key = tls
    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(ca), private_key=read(key), certificate_chain=read(cert)
    )
    channel = grpc.secure_channel(address, credentials)
else:
    channel = grpc.insecure_channel(address)
channel.subscribe(seen, try_to_connect=True)
stub = ids_pb2_grpc.IdsStub(channel)
end = time.monotonic() + seconds


def calls():
    while time.monotonic() < end:
        start = now_ms()
        try:
            ids = stub.GetIds(ids_pb2.GetIdsRequest(count=1), timeout=5).ids
            assert len(ids) == 1, ids
            result = "ok"
        except grpc.RpcError as error:
            result = error.code().name
        with lock:
            print(f"call {start} {now_ms()} {result} {readies}", flush=True)
        time.sleep(pause)


workers = [threading.Thread(target=calls) for _ in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
channel.close()
say("done")
