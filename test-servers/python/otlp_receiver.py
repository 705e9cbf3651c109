"""An OTLP receiver for the tests: the collector services of PyPI's `opentelemetry-proto`
(gRPC with `grpcio`, and OTLP/HTTP's protobuf POSTs with the same classes). Each export
received is written to the file given, one JSON object a line; a line `ready GRPC HTTP`
on stdout gives the ports.

`otlp_receiver.py FILE [CERT KEY CLIENT_CA]`: with a certificate, both ports take TLS
alone and ask for a client certificate signed by CLIENT_CA."""

import json
import ssl
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

out = open(sys.argv[1], "a", buffering=1)
lock = threading.Lock()


def attributes(pairs):
    return {pair.key: getattr(pair.value, pair.value.WhichOneof("value")) for pair in pairs}


def metrics(request, via):
    points = []
    for resource_metrics in request.resource_metrics:
        resource = attributes(resource_metrics.resource.attributes)
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                for point in getattr(metric, kind).data_points:
                    entry = {"name": metric.name, "unit": metric.unit, "kind": kind, "attributes": attributes(point.attributes)}
                    if kind == "histogram":
                        entry.update(count=point.count, sum=point.sum, bounds=list(point.explicit_bounds), buckets=list(point.bucket_counts))
                    else:
                        entry["value"] = point.as_int
                    if kind == "sum":
                        entry["monotonic"] = metric.sum.is_monotonic
                    points.append(entry)
    write({"signal": "metrics", "via": via, "resource": resource, "points": points})


def traces(request, via):
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                spans.append({
                    "name": span.name,
                    "kind": span.kind,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "status": span.status.code,
                    "attributes": attributes(span.attributes),
                })
    write({"signal": "traces", "via": via, "resource": resource, "spans": spans})


def write(record):
    with lock:
        out.write(json.dumps(record) + "\n")


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        metrics(request, "grpc")
        return metrics_service_pb2.ExportMetricsServiceResponse()


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        traces(request, "grpc")
        return trace_service_pb2.ExportTraceServiceResponse()


class Http(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(415)
            self.end_headers()
            return
        if self.path == "/v1/metrics":
            metrics(metrics_service_pb2.ExportMetricsServiceRequest.FromString(body), "http")
            answer = metrics_service_pb2.ExportMetricsServiceResponse()
        elif self.path == "/v1/traces":
            traces(trace_service_pb2.ExportTraceServiceRequest.FromString(body), "http")
            answer = trace_service_pb2.ExportTraceServiceResponse()
        else:
            self.send_response(404)
            self.end_headers()
            return
        payload = answer.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
if len(sys.argv) > 2:
    cert, key, client_ca = sys.argv[2:5]
    with open(cert, "rb") as c, open(key, "rb") as k, open(client_ca, "rb") as ca:
        credentials = grpc.ssl_server_credentials([(k.read(), c.read())], ca.read(), require_client_auth=True)
    grpc_port = server.add_secure_port("127.0.0.1:0", credentials)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(client_ca)
    context.verify_mode = ssl.CERT_REQUIRED
    http.socket = context.wrap_socket(http.socket, server_side=True)
else:
    grpc_port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(f"ready {grpc_port} {http.server_address[1]}", flush=True)
http.serve_forever()
