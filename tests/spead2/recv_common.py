"""What the spead2 receivers here share: their socket options, a socket bound the way
they all bind it, and the deadline that stops a stream without its stop heap.

The scripts run as `python3 tests/spead2/<script>.py`, so this directory is on
sys.path and `import recv_common` finds this file.
"""

import socket
import threading


def add_socket_args(ap, timeout):
    """The options of the receiving socket, and --timeout (seconds, `timeout` by
    default)."""
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=timeout)
    ap.add_argument("--buffer", type=int, default=32 << 20)
    ap.add_argument("--max-size", type=int, default=9200)


def bound_socket(args):
    """Our own UDP socket, so port 0 works and the bound port can be printed: bound to
    --bind and --port, with a receive buffer of --buffer bytes (forced past rmem_max
    when root may)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, 33, args.buffer)  # SO_RCVBUFFORCE (root)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.buffer)
    sock.bind((args.bind, args.port))
    return sock


def print_ready(sock):
    """The first line of every receiver's protocol: the socket exists, the port bound."""
    print(f"ready port={sock.getsockname()[1]}", flush=True)


class Deadline:
    """Stops `stream` after `timeout` seconds unless the block it guards ends first;
    `word` then says how the stream ended: "timeout" or "end"."""

    def __init__(self, stream, timeout):
        self.timed_out = threading.Event()

        def expire():
            self.timed_out.set()
            stream.stop()

        self.timer = threading.Timer(timeout, expire)

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc):
        self.timer.cancel()
        return False

    def word(self):
        return "timeout" if self.timed_out.is_set() else "end"
