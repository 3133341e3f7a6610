"""Exceptions of lazyattn: each carries the C library's (or the server's) message."""


class LazyattnError(Exception):
    """An error of the engine. `status` is the C status name ("invalid_arg", "io", "too_long",
    ...), `param` the request field at fault when known, str(e) the message."""

    def __init__(self, message, status="internal", param=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param

    def __str__(self):
        return self.message


class InvalidArgumentError(LazyattnError, ValueError):
    """A bad value: out of range, unknown method or device, too long, unsupported."""

    def __init__(self, message, status="invalid_arg", param=None):
        super().__init__(message, status, param)


class InvalidTypeError(LazyattnError, TypeError):
    """A value of the wrong type (the server's invalid_type)."""

    def __init__(self, message, param=None):
        super().__init__(message, "invalid_arg", param)


class ModelLoadError(LazyattnError):
    """The model directory is missing, unreadable or malformed."""


def from_status(status, message, param=None):
    """The exception for a C status name and message."""
    if status in ("invalid_arg", "too_long", "unsupported", "not_found"):
        return InvalidArgumentError(message, status, param)
    if status in ("io", "format"):
        return ModelLoadError(message, status, param)
    return LazyattnError(message, status, param)
