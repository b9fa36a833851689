"""The one exception strata_pyg raises for everything that goes wrong
with a server: it names the server and the cause."""


class StrataError(RuntimeError):
    """A Strata server failed, timed out, is unreachable, refused a request,
    speaks another protocol version, or its reply was too large.

    Attributes: ``server`` (its address, and for a child server its pid),
    ``code`` (the gRPC status code name, e.g. ``"UNAVAILABLE"``,
    ``"DEADLINE_EXCEEDED"``, ``"RESOURCE_EXHAUSTED"``, ``"UNAUTHENTICATED"``,
    ``"FAILED_PRECONDITION"``, or ``"VERSION"``, ``"TIMEOUT"``,
    ``"EXITED"``, ``"BAD_REPLY"`` for conditions found by the client) and
    ``details`` (the cause in words).
    """

    def __init__(self, server, code, details):
        self.server = server
        self.code = code
        self.details = details
        super().__init__(f"strata server {server}: {code}: {details}")
