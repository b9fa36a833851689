"""gRPC stubs of the strata.v1.Sampler service, written on grpc's generic
API (channel.unary_unary / unary_stream) so that no grpc_tools is needed,
and the channel settings every connection uses."""

import grpc

from ._pb import sampler_pb2 as pb
from .errors import StrataError

PROTOCOL_VERSION = pb.PROTOCOL_VERSION_CURRENT
SECRET_METADATA = "strata-secret"
_SERVICE = "/strata.v1.Sampler/"


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"tls: cannot read the {what} {path}: {e}") from None


def target_of(address):
    """The gRPC target of an address: "host:port", "unix:PATH",
    "unix:///PATH" or "grpc://host:port"."""
    if address.startswith("grpc://"):
        return address[len("grpc://"):]
    return address


class Connection:
    """A channel to one server. ``tls`` is a dict with ``cert``, ``key``
    and ``ca`` (PEM files) and optionally ``name`` (the DNS name in the
    server's certificate, "strata" by default); ``secret`` is the shared
    secret. Every error is raised as StrataError naming the server."""

    def __init__(self, address, secret=None, tls=None, timeout=60.0, max_send_bytes=64 << 20):
        self.address = address
        self.timeout = timeout
        options = [
            ("grpc.max_receive_message_length", -1),  # the server bounds what it sends
            ("grpc.max_send_message_length", max_send_bytes),
            ("grpc.enable_http_proxy", 0),
            # A connection of its own (gRPC shares one between equal
            # channels): a loader's several streams to one server
            # (streams=) each get their TCP connection and HTTP/2 window.
            ("grpc.use_local_subchannel_pool", 1),
            # Find a dead server behind a silent network; the server
            # accepts a ping every 10 s at most.
            ("grpc.keepalive_time_ms", 20000),
            ("grpc.keepalive_timeout_ms", 10000),
        ]
        target = target_of(address)
        if tls:
            if not isinstance(tls, dict) or not {"cert", "key", "ca"} <= set(tls):
                raise ValueError("tls: want a dict with 'cert', 'key' and 'ca' (PEM files) and optionally 'name'")
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls["ca"], "CA certificate"),
                private_key=_read(tls["key"], "private key"),
                certificate_chain=_read(tls["cert"], "certificate"))
            options.append(("grpc.ssl_target_name_override", tls.get("name") or "strata"))
            self.channel = grpc.secure_channel(target, creds, options)
        else:
            self.channel = grpc.insecure_channel(target, options)
        self.metadata = ((SECRET_METADATA, secret),) if secret else None
        self._info = self.channel.unary_unary(
            _SERVICE + "Info", request_serializer=pb.InfoRequest.SerializeToString,
            response_deserializer=pb.InfoReply.FromString)
        # Sample's batches come as the received bytes (no deserializer):
        # the loader parses them itself, its tensors left in place
        # (_tensor.parse_batch), and a malformed one is its BAD_REPLY.
        self._sample = self.channel.unary_stream(
            _SERVICE + "Sample", request_serializer=pb.SampleRequest.SerializeToString,
            response_deserializer=None)
        self._sample_shm = self.channel.stream_stream(
            _SERVICE + "SampleShm", request_serializer=pb.ShmControl.SerializeToString,
            response_deserializer=pb.Batch.FromString)
        self._features = self.channel.unary_unary(
            _SERVICE + "Features", request_serializer=pb.FeaturesRequest.SerializeToString,
            response_deserializer=pb.FeaturesReply.FromString)

    def error(self, e):
        """The StrataError of a grpc.RpcError."""
        if isinstance(e, grpc.RpcError) and hasattr(e, "code"):
            return StrataError(self.address, e.code().name, e.details())
        return StrataError(self.address, "ERROR", str(e))

    def info(self, timeout=None):
        try:
            r = self._info(pb.InfoRequest(protocol_version=PROTOCOL_VERSION),
                           timeout=timeout or self.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            raise self.error(e) from None
        if r.protocol_version != PROTOCOL_VERSION:
            raise StrataError(self.address, "VERSION",
                              f"the server speaks protocol {r.protocol_version}, this strata_pyg {PROTOCOL_VERSION}: "
                              "use a strata binary and a strata_pyg of the same release")
        return r

    def features(self, ids, features=True, labels=False, timeout=None):
        from ._tensor import encode
        req = pb.FeaturesRequest(protocol_version=PROTOCOL_VERSION, ids=encode(ids, "ids"),
                                 features=features, labels=labels)
        try:
            return self._features(req, timeout=timeout or self.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            raise self.error(e) from None

    def sample(self, req):
        """Opens a Sample stream: an iterator of encoded Batch messages
        (bytes; _tensor.parse_batch reads them) with a cancel() method.
        Errors surface from next() as grpc.RpcError."""
        req.protocol_version = PROTOCOL_VERSION
        return self._sample(req, metadata=self.metadata)

    def sample_shm(self, control):
        """Opens a SampleShm stream whose requests are the iterator
        ``control`` (the request first, then releases): an iterator of
        Batch messages with a cancel() method."""
        return self._sample_shm(iter(control), metadata=self.metadata)

    def close(self):
        self.channel.close()
