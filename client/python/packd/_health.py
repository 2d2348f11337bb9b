"""Messages of the standard gRPC health service (grpc.health.v1).

Debian ships no grpcio-health-checking package and the service's .proto is
not installed, so the two messages are declared here through protobuf's
descriptor API (the schema published by the gRPC project:
HealthCheckRequest{string service = 1},
HealthCheckResponse{ServingStatus status = 1}) in a private descriptor
pool, which cannot clash with another copy of the same names.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

CHECK_METHOD = "/grpc.health.v1.Health/Check"
STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}

_classes = None


def _build():
    fdp = descriptor_pb2.FileDescriptorProto(name="packd_client/health.proto", package="grpc.health.v1", syntax="proto3")
    req = fdp.message_type.add(name="HealthCheckRequest")
    req.field.add(name="service", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    resp = fdp.message_type.add(name="HealthCheckResponse")
    enum = resp.enum_type.add(name="ServingStatus")
    for number, name in STATUS_NAMES.items():
        enum.value.add(name=name, number=number)
    resp.field.add(name="status", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_ENUM,
                   type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
                   label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    req_desc = pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")
    resp_desc = pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(req_desc), message_factory.GetMessageClass(resp_desc)
    factory = message_factory.MessageFactory(pool)
    return factory.GetPrototype(req_desc), factory.GetPrototype(resp_desc)


def classes():
    """(HealthCheckRequest, HealthCheckResponse) message classes."""
    global _classes
    if _classes is None:
        _classes = _build()
    return _classes
