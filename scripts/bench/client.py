"""A minimal RESP2 client: what the benchmark sends its commands with, and
the server's INFO and commandstats read back as numbers."""

import socket


class ReplyError(Exception):
    pass


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode()
        else:
            b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Conn:
    def __init__(self, port, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb", buffering=1 << 20)

    def read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("server closed the connection")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest
        if t == b"-":
            return ReplyError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self.read() for _ in range(n)]
        raise ConnectionError("bad reply line %r" % line)

    def call(self, *args):
        self.sock.sendall(encode(args))
        r = self.read()
        if isinstance(r, ReplyError):
            raise r
        return r

    def pipeline(self, cmds, check=True):
        self.sock.sendall(b"".join(encode(c) for c in cmds))
        replies = [self.read() for _ in cmds]
        if check:
            for r in replies:
                if isinstance(r, ReplyError):
                    raise r
        return replies

    def close(self):
        self.f.close()
        self.sock.close()


def info(conn, section):
    text = conn.call("INFO", section).decode()
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def cmdstats(conn):
    """{command name (lower case): (calls, usec)} since the last RESETSTAT."""
    out = {}
    for k, v in info(conn, "commandstats").items():
        if not k.startswith("cmdstat_"):
            continue
        fields = dict(f.split("=", 1) for f in v.split(","))
        out[k[len("cmdstat_"):].lower()] = (int(fields["calls"]), int(fields["usec"]))
    return out


def usec_per_call(stats, name, per=None):
    calls, usec = stats.get(name, (0, 0))
    n = per if per is not None else calls
    return usec / n if n else float("nan")
