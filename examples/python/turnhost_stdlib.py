#!/usr/bin/env python3
"""An integrator with nothing but Python's standard library: a workspace, a tree uploaded into
it, a command run to its end with all its output and exit code, the results listed and
downloaded, and everything deleted again. Only the HTTP API (docs/http-api.md).

    TURNHOST_TOKEN=... python3 turnhost_stdlib.py --socket /run/turnhost/api.sock

Prints one JSON object with what it saw.
"""
import argparse
import http.client
import json
import os
import socket
import sys
import urllib.parse
import uuid


class UnixConnection(http.client.HTTPConnection):
    """HTTP over the supervisor's unix socket (the default install listens there)."""

    def __init__(self, path):
        super().__init__("localhost")
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


class Api:
    def __init__(self, connect, token):
        self.connect = connect
        self.token = token

    def call(self, method, path, body=None, query=None, raw=False, expect=(200, 201)):
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        headers = {"Authorization": f"Bearer {self.token}"}
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = self.connect()
        try:
            conn.request(method, path, body=body, headers=headers)
            res = conn.getresponse()
            data = res.read()
        finally:
            conn.close()
        if res.status not in expect:
            raise RuntimeError(f"{method} {path}: {res.status} {data.decode(errors='replace')}")
        return (data, dict(res.getheaders())) if raw else json.loads(data)


def files_path(workspace):
    return f"/api/workspaces/{urllib.parse.quote(workspace)}/files"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", help="the API's unix socket")
    parser.add_argument("--url", help="http://HOST:PORT instead of a socket")
    args = parser.parse_args()
    token = os.environ["TURNHOST_TOKEN"]
    if args.socket:
        api = Api(lambda: UnixConnection(args.socket), token)
    else:
        parsed = urllib.parse.urlsplit(args.url)
        api = Api(lambda: http.client.HTTPConnection(parsed.hostname, parsed.port), token)

    session = f"py-{uuid.uuid4()}"
    workspace = api.call("POST", "/api/workspaces", {"sessionId": session})["workspace"]["id"]

    # Upload a small tree: parent directories are made for the workspace's own uid.
    tree = {"src/app.py": b"print('hello from the workspace')\n", "src/lib/data.txt": b"one\ntwo\nthree\n"}
    for rel, data in tree.items():
        api.call("PUT", files_path(workspace), data, {"path": rel, "mode": "create"}, expect=(201,))

    # Run and wait: the answer comes once the turn has its result (or the wait passed).
    script = "cat src/lib/data.txt; wc -l < src/lib/data.txt > src/count.txt; echo to-stderr >&2; exit 7"
    turn = api.call(
        "POST",
        "/api/turns",
        {"sessionId": session, "mode": "ordinary", "workspace": workspace, "argv": ["/bin/sh", "-c", script]},
        {"wait": "60"},
        expect=(201,),
    )["turn"]
    while turn["state"] != "finished":
        turn = api.call("GET", f"/api/turns/{turn['id']}", query={"wait": "60"})["turn"]

    streams = {}
    for stream in ("stdout", "stderr"):
        data, headers = api.call("GET", f"/api/turns/{turn['id']}/output", query={"stream": stream}, raw=True)
        streams[stream] = {
            "text": data.decode(),
            "written": int(headers["X-Turnhost-Output-Written"]),
            "dropped": int(headers["X-Turnhost-Output-Dropped"]),
        }

    listing = api.call("GET", files_path(workspace), query={"path": "src"})["entries"]
    count, _ = api.call("GET", files_path(workspace), query={"path": "src/count.txt"}, raw=True)

    api.call("DELETE", f"/api/workspaces/{urllib.parse.quote(workspace)}")
    api.call("DELETE", f"/api/sessions/{urllib.parse.quote(session)}")
    left = api.call("GET", "/api/workspaces", query={"session": session})

    json.dump(
        {
            "exitCode": turn["result"]["exitCode"],
            "status": turn["result"]["status"],
            "stdout": streams["stdout"],
            "stderr": streams["stderr"],
            "listing": sorted(entry["name"] for entry in listing),
            "count": count.decode().strip(),
            "workspacesLeft": len(left["workspaces"]),
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
