"""Two gRPC-over-TLS clients of `atomflake serve --tls-client-ca ...`, each with a client
certificate of its own and one channel (one connection) kept open throughout, with stubs
that `grpcio-tools` generates from the proto.

Usage: serve_mtls_client.py ADDRESS PROTO_ROOT STUB_DIR CA FIRST_CERT FIRST_KEY SECOND_CERT SECOND_KEY

Each channel gets IDs, and the script prints `minted N`. Then it waits for a line on
stdin (the client CA replaced meanwhile), and for each channel in turn: waits for its
connection to leave READY (the server closing it), up to 20 s for the first and then 3 s
for the second, makes one more `GetIds` call on it, and prints `NAME: STATE CALL`, where
NAME is `first` or `second`, STATE is `closed` when the connection left READY or `open`
when it did not, and CALL is `ok` or the call's status code name.
"""

import sys
import threading

import grpc
import serve_stubs

address, proto_root, stubs, ca = sys.argv[1:5]
pairs = {"first": sys.argv[5:7], "second": sys.argv[7:9]}
ids_pb2, ids_pb2_grpc = serve_stubs.generate(proto_root, stubs)


def read(path):
    with open(path, "rb") as file:
        return file.read()


class Client:
    def __init__(self, cert, key):
        credentials = grpc.ssl_channel_credentials(
            root_certificates=read(ca), private_key=read(key), certificate_chain=read(cert)
        )
        self.channel = grpc.secure_channel(address, credentials)
        self.stub = ids_pb2_grpc.IdsStub(self.channel)
        self.left_ready = threading.Event()
        self.watching = False
        self.channel.subscribe(self.seen, try_to_connect=False)

    def seen(self, state):
        if self.watching and state != grpc.ChannelConnectivity.READY:
            self.left_ready.set()

    def get_ids(self, count):
        return list(self.stub.GetIds(ids_pb2.GetIdsRequest(count=count), timeout=10).ids)


clients = {name: Client(cert, key) for name, (cert, key) in pairs.items()}
minted = []
for client in clients.values():
    minted += client.get_ids(3)
    minted += client.get_ids(3)
    client.watching = True
assert len(set(minted)) == len(minted), minted
print(f"minted {len(minted)}", flush=True)
sys.stdin.readline()
for (name, client), wait in zip(clients.items(), [20, 3]):
    state = "closed" if client.left_ready.wait(wait) else "open"
    try:
        client.get_ids(1)
        call = "ok"
    except grpc.RpcError as error:
        call = error.code().name
    print(f"{name}: {state} {call}", flush=True)
