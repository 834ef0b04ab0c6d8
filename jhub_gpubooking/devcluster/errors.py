"""Kubernetes ``Status`` failures, raised inside the devcluster and rendered as the API server would."""

from __future__ import annotations


class ApiError(Exception):
    """A refusal the simulated API server answers with a ``Status`` object and an HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body

    @classmethod
    def not_found(cls, resource: str, name: str) -> ApiError:
        return cls(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})

    @classmethod
    def already_exists(cls, resource: str, name: str) -> ApiError:
        return cls(409, "AlreadyExists", f'{resource} "{name}" already exists', {"name": name, "kind": resource})

    @classmethod
    def conflict(cls, resource: str, name: str) -> ApiError:
        message = (
            f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again"
        )
        return cls(409, "Conflict", message, {"name": name, "kind": resource})

    @classmethod
    def invalid(cls, kind: str, name: str, causes: list[str]) -> ApiError:
        message = f'{kind} "{name}" is invalid: ' + ", ".join(causes)
        return cls(422, "Invalid", message, {"name": name, "kind": kind})

    @classmethod
    def gone(cls, resource_version: int) -> ApiError:
        # Real API servers say reason "Expired" here; clients only look at the 410 code.
        return cls(410, "Gone", f"too old resource version: {resource_version}")

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)
