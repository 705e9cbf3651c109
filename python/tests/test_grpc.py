"""The gRPC messages and stubs of `atomflake serve` shipped in the wheel as `atomflake.v1`
(the proto's package), beside the native module, which they must not hide."""

import pytest

from conftest import server_url


def test_the_stubs_import_as_the_protos_package_beside_the_native_module() -> None:
    import atomflake
    from atomflake.v1 import ids_pb2, ids_pb2_grpc

    request = ids_pb2.DecodeRequest(id=1050118621198921728, masked=True)
    assert ids_pb2.DecodeRequest.FromString(request.SerializeToString()) == request
    assert ids_pb2.DESCRIPTOR.package == "atomflake.v1"
    assert hasattr(ids_pb2_grpc, "IdsStub")
    # The native module is still the package's.
    assert atomflake.Layout.TWITTER.decode(1050118621198921728).node == 347


@pytest.mark.servers
def test_the_stubs_call_a_running_server() -> None:
    import grpc

    from atomflake.v1 import ids_pb2, ids_pb2_grpc

    address = server_url("ATOMFLAKE_TEST_SERVE")
    with grpc.insecure_channel(address) as channel:
        stub = ids_pb2_grpc.IdsStub(channel)
        ids = list(stub.GetIds(ids_pb2.GetIdsRequest(count=3), timeout=10).ids)
        assert len(set(ids)) == 3 and ids == sorted(ids)
        layout = stub.GetLayout(ids_pb2.GetLayoutRequest(), timeout=10)
        assert (layout.layout.timestamp_bits, list(layout.nodes)) == (41, [5])
        decoded = stub.Decode(ids_pb2.DecodeRequest(id=ids[0]), timeout=10)
        assert (decoded.node, decoded.id) == (5, ids[0])
