"""moto's S3 server on loopback, with a simulated outage that keeps the data.

Run by scripts/s3-server inside its venv; see that script for the interface. Serves moto's
whole AWS API (S3 is what envc uses) on 127.0.0.1:PORT with werkzeug's threaded server, the
way `moto_server` does, but:

- PORT 0 picks a free port; the port is written to --port-file once the socket listens
  (written to a temporary name and renamed, so a reader never sees half a number).
- SIGUSR1 is an outage: the listening socket is closed (new connections are refused) and
  every open connection is cut, in the middle of a request or not; moto's data stays in
  this process. SIGUSR2 serves again on the same port. To a client this is a server that
  crashed and came back with durable storage, which is what an S3 outage looks like.
  moto itself cannot persist its state: its recorder replays requests, but multipart
  upload ids come from os.urandom, so a replay loses every multipart object.
- SIGHUP adds the EC2 images of the file that MOTO_AMIS_PATH names (read again) to every EC2
  backend that exists, keeping everything else (instances, VPCs, ...), and to the list that
  backends made later load: a newer image appears as it would when its publisher registers
  it. moto reads that file once, at import; images already known are left as they are.
- SIGTERM and SIGINT exit at once.
"""

import argparse
import json
import os
import signal
import socket
import struct
import sys
import threading

from werkzeug.serving import make_server

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)

# Connections being served, so that an outage can cut them.
open_connections = set()
open_lock = threading.Lock()


class TrackedHandler(MotoRequestHandler):
    def setup(self):
        super().setup()
        with open_lock:
            open_connections.add(self.connection)

    def finish(self):
        with open_lock:
            open_connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            # The connection was cut by an outage while the handler ran.
            pass

    def handle(self):
        try:
            super().handle()
        except OSError:
            pass


def cut(conn):
    """Ends a connection with a reset, as a crashed server's kernel would."""
    try:
        # Linger 0: the close that follows (in the handler's thread) sends RST, not FIN.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # shutdown wakes a handler blocked reading the request body; close alone would not.
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class Server:
    def __init__(self, app, port):
        self.app = app
        self.port = port
        self.httpd = None
        self.thread = None

    def serve(self):
        self.httpd = make_server(
            "127.0.0.1", self.port, self.app, threaded=True, request_handler=TrackedHandler
        )
        self.port = self.httpd.server_port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def outage(self):
        if self.httpd is None:
            return
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
        self.httpd = None
        with open_lock:
            conns = list(open_connections)
        for conn in conns:
            cut(conn)


def reload_amis():
    """Adds the images of MOTO_AMIS_PATH that are new to moto; returns how many the file
    holds. What AmiBackend._load_amis does at a backend's creation, for new images only (it
    would make the known ones afresh, bringing back a deregistered one)."""
    from moto.core.parse import default_timestamp_parser
    from moto.ec2.models import amis as amis_module
    from moto.ec2.models import ec2_backends

    with open(os.environ["MOTO_AMIS_PATH"], encoding="utf-8") as f:
        images = json.load(f)
    known = {ami["ami_id"] for ami in amis_module.AMIS}
    new = [ami for ami in images if ami["ami_id"] not in known]
    for ami in new:
        ami["owner_alias"] = "amazon"
        if isinstance(ami.get("creation_date"), str):
            ami["creation_date"] = default_timestamp_parser(ami["creation_date"])
    # Backends made from now on load them with the others.
    amis_module.AMIS.extend(new)
    # dict's own methods: the BackendDict's would create backends for what they look up.
    for regions in dict.values(ec2_backends):
        for backend in dict.values(regions):
            for ami in new:
                backend.amis[ami["ami_id"]] = amis_module.Ami(backend, **ami)
    return len(images)


def write_atomically(path, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    args = parser.parse_args()

    wanted = {signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGTERM, signal.SIGINT}
    # Blocked before any thread starts (threads inherit the mask), and taken one at a time by
    # sigwait below: a thread that did not block SIGUSR1 would die of its default action.
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)

    # moto builds some URLs from MOTO_PORT; it is known only once the socket is bound.
    server = Server(DomainDispatcherApplication(create_backend_app), args.port)
    server.serve()
    os.environ["MOTO_PORT"] = str(server.port)

    # After binding, so that a reader of the file can connect at once.
    if args.port_file:
        write_atomically(args.port_file, f"{server.port}\n")
    print(f"s3-server: serving on http://127.0.0.1:{server.port}", flush=True)

    while True:
        sig = signal.sigwait(wanted)
        if sig == signal.SIGUSR1:
            server.outage()
            print("s3-server: outage: port closed, connections cut, data kept", flush=True)
        elif sig == signal.SIGUSR2:
            if server.httpd is None:
                server.serve()
            print(f"s3-server: serving again on port {server.port}", flush=True)
        elif sig == signal.SIGHUP:
            try:
                n = reload_amis()
                print(f"s3-server: images reloaded ({n} in MOTO_AMIS_PATH)", flush=True)
            except Exception as e:  # reported, and the server goes on
                print(f"s3-server: images not reloaded: {e!r}", flush=True)
        else:
            print(f"s3-server: exiting on signal {sig}", flush=True)
            # Handler threads may be mid-request: do not wait for them.
            os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
