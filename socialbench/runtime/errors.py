"""The one error hierarchy of the runtime, and its HTTP status codes.

    ServiceError
     ├── ClientError         4xx, nothing changed: InvalidArgument 400, Unauthorized 401,
     │                       NotFound 404, Conflict 409, PayloadTooLarge 413 (over a cap),
     │                       ClientClosedRequest 499 (the caller hung up first)
     ├── InternalError       500: a fault no handler expected (a bug)
     ├── StoreError          503: memcached, Redis or MongoDB failed
     └── RPCError            a neighbour failed: NeighbourUnavailable 503 (no connection),
                             NeighbourTimeout 504, NeighbourError (its status, passed on)

Every error carries a ``kind`` (its class name) used in JSON error bodies and in the
per-process error counters. These are the services' answers, raised and caught inside a
service: not under the tools' root (socialbench/errors.py), which a command catches to exit.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every error the services raise on purpose."""

    status_code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def kind(self) -> str:
        return type(self).__name__


class ClientError(ServiceError):
    status_code = 400


class InvalidArgument(ClientError):
    status_code = 400


class Unauthorized(ClientError):
    status_code = 401


class NotFound(ClientError):
    status_code = 404


class Conflict(ClientError):
    status_code = 409


class PayloadTooLarge(ClientError):
    status_code = 413


class ClientClosedRequest(ClientError):
    """The caller closed the connection before its body arrived (nginx's 499): nobody
    reads the answer, but the request is counted, not logged as a fault of ours."""

    status_code = 499


class InternalError(ServiceError):
    """An exception nothing mapped: answered 500 like the rest, the connection kept."""

    status_code = 500


class StoreError(ServiceError):
    status_code = 503


class RPCError(ServiceError):
    status_code = 502


class NeighbourUnavailable(RPCError):
    status_code = 503


class NeighbourTimeout(RPCError):
    status_code = 504


class NeighbourError(RPCError):
    """A neighbour answered with an error; its status and kind are kept."""

    def __init__(self, message: str, *, status_code: int, remote_kind: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.remote_kind = remote_kind


CLIENT_ERRORS_BY_KIND: dict[str, type[ClientError]] = {
    cls.__name__: cls for cls in (
        ClientError, InvalidArgument, Unauthorized, NotFound, Conflict, PayloadTooLarge
    )
}
