"""A local OpenAI-compatible chat-completions server that answers from a script (`sdk.agent.script`).

It binds 127.0.0.1 only, on a free port, and records every request it receives, so tests (and anyone trying the
loop against "a server") can drive real litellm end to end and count the HTTP requests it made:

    with ScriptServer(Script.load("script.json")) as server:
        fib-sdk regenerate DEF --backend litellm --model openai/scripted --api-base server.url

    python -m sdk.agent.script_server SCRIPT.json [--port 8765]     # serve until interrupted
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .script import Script, ScriptExhausted, chars_of, completion_response, role_of


class ScriptServer:
    def __init__(self, script: Script, port: int = 0):
        self.script = script
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _handler(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: the recorded requests are the log
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                    pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": owner.script.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                messages = body.get("messages") or []
                role = role_of(messages)
                with owner._lock:
                    number = len(owner.requests) + 1
                    owner.requests.append({"role": role, "body": body, "t": time.time()})
                try:
                    entry = owner.script.next(role)
                except ScriptExhausted as exc:
                    self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                    return
                if entry.get("delay_s"):
                    time.sleep(float(entry["delay_s"]))
                if error := entry.get("error"):
                    self._send(int(error.get("status", 500)), {"error": {"message": error.get("message", "error"),
                                                                         "type": error.get("type", "server_error")}})
                    return
                self._send(200, completion_response(entry, model=owner.script.model, role=role, number=number,
                                                    request_chars=chars_of(messages)))

        return Handler

    def start(self) -> "ScriptServer":
        self._thread = threading.Thread(target=self._server.serve_forever, name="script-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> "ScriptServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = ScriptServer(Script.load(args.script), args.port).start()
    print(f"serving {args.script} at {server.url} (127.0.0.1 only); Ctrl-C stops", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
