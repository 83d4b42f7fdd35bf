"""A small JSON-over-HTTP client on the standard library (http.client), one kept-alive
connection per sender thread."""
import base64
import http.client
import json
import socket
import ssl
import urllib.parse


class Unreachable(Exception):
    """The server could not be reached, timed out, or answered that it cannot serve now
    (429, 5xx): the request may be tried again. `retry_after` is the server's hint in
    seconds, when it gave one."""

    def __init__(self, reason, retry_after=None):
        super().__init__(reason)
        self.retry_after = retry_after


class Refused(Exception):
    """The server answered with a problem (4xx other than 429): trying the same request
    again would get the same answer."""

    def __init__(self, status, problem):
        self.status = status
        self.problem = problem if isinstance(problem, dict) else {}
        super().__init__(f"{status} {self.code}: {self.problem.get('detail', '')}")

    @property
    def code(self):
        return self.problem.get("code")

    def names_field(self, field, prefix=False):
        """Whether the problem is about `field` (an `errors` entry names it; with
        `prefix`, also a part of it such as `output[3]`)."""
        for error in self.problem.get("errors") or []:
            named = error.get("field") if isinstance(error, dict) else None
            if isinstance(named, str) and (named == field or (prefix and named.startswith(field + "["))):
                return True
        return False


class Connection:
    """Requests to one headwayd. `base_url` may carry `user:password@` (sent as Basic
    authorization when there is no token, as libcurl does for the CLI)."""

    def __init__(self, base_url, token=None, timeout=5.0):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"HEADWAY_URL must be an http:// or https:// URL, not {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.path = parts.path.rstrip("/")
        self.timeout = timeout
        self.shown_url = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "") + self.path
        self.headers = {"Content-Type": "application/json", "Accept": "application/json",
                        "User-Agent": "headway-python"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        elif parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            self.headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self._connection = None

    def _connect(self):
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def close(self):
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def request(self, method, path, body=None):
        """Sends one request; returns the decoded JSON reply (None when empty). Raises
        `Unreachable` or `Refused`."""
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() if body is not None else b""
        # A kept-alive connection the server closed meanwhile fails at once: the request
        # is sent again once on a fresh connection before the server counts as away.
        for attempt in (0, 1):
            fresh = self._connection is None
            if fresh:
                self._connection = self._connect()
            try:
                self._connection.request(method, self.path + path, body=payload, headers=self.headers)
                response = self._connection.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as error:
                self.close()
                if attempt == 0 and not fresh and not isinstance(error, socket.timeout):
                    continue
                raise Unreachable(str(error) or type(error).__name__) from None
            if response.getheader("Connection", "").lower() == "close":
                self.close()
            break
        try:
            decoded = json.loads(data) if data else None
        except ValueError:
            decoded = None
        status = response.status
        if status == 429 or status >= 500:
            retry_after = response.getheader("Retry-After")
            try:
                retry_after = float(retry_after) if retry_after else None
            except ValueError:
                retry_after = None
            detail = decoded.get("detail") if isinstance(decoded, dict) else None
            raise Unreachable(f"{status} {detail or response.reason}", retry_after)
        if status >= 400:
            raise Refused(status, decoded)
        return decoded
