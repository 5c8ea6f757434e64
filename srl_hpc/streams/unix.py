"""The same-node message path of the shared-memory inference transport: Unix SEQPACKET sockets.

An shm request's arrays already sit in the actor's shared memory; what crosses is a header of a few hundred
bytes each way. Through ZMQ each header is handed from the calling thread to ZMQ's I/O thread and back on
both sides, which cost a CartPole policy worker ~100 us of CPU per request on a busy 2-core node; a Unix
socket is one system call each way in the calling thread. SEQPACKET keeps message boundaries and gives each
actor a connection of its own (datagram sockets share one receive queue of 10 messages), and an actor that
dies closes its connection.

The sockets live in a directory of the run's under /dev/shm, where the segments are (whatever shares the
one shares the other), made mode 0700 so that only the run's user reaches them: for these sockets what
CURVE is for the TCP streams.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import socket
import stat
from pathlib import Path

ROOT = Path("/dev/shm")
MAX_MESSAGE = 65536  # headers are a few hundred bytes; a longer message is malformed


def socket_dir(run_dir) -> Path:
    return ROOT / f"srl-sock-{hashlib.sha1(str(run_dir).encode()).hexdigest()[:12]}"


def socket_path(run_dir, worker: str) -> str:
    """Where `worker` (a policy handler's host) listens for same-node requests."""
    return str(socket_dir(run_dir) / worker.replace("/", "-"))


def private_dir(path: Path) -> Path:
    """Create `path` mode 0700, or check that the existing one is this user's and private to it."""
    path.mkdir(mode=0o700, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(
            f"{path} is not a directory private to this user (uid {os.getuid()}): it holds the "
            f"run's same-node inference sockets; remove it or fix its owner and mode"
        )
    return path


class Listener:
    """The server's end: accepts actors' connections and hands out their messages one at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        private_dir(Path(path).parent)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a predecessor's
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(path)
        self.sock.listen(1024)
        self.sock.setblocking(False)
        self.epoll = select.epoll()
        self.epoll.register(self.sock.fileno(), select.EPOLLIN)
        self.conns: dict[int, socket.socket] = {}
        self._ready: list[int] = []  # fds the last epoll found readable, not yet read

    def fileno(self) -> int:
        """Readable when a message or a connection waits (for zmq.Poller beside the ZMQ socket)."""
        return self.epoll.fileno()

    def recv_nowait(self) -> tuple[socket.socket, bytes] | None:
        """(connection, message) of one waiting message, or None when none waits."""
        while True:
            if not self._ready:
                self._ready = [fd for fd, _ in self.epoll.poll(0)]
                if not self._ready:
                    return None
            fd = self._ready.pop()
            if fd == self.sock.fileno():
                self._accept()
                continue
            conn = self.conns.get(fd)
            if conn is None:
                continue
            try:
                data = conn.recv(MAX_MESSAGE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:  # the actor closed its end (or died)
                self._drop(fd)
                continue
            return conn, data

    def reply(self, conn: socket.socket, data: bytes) -> None:
        """Send without ever blocking; an actor gone meanwhile misses nothing (it is replaced)."""
        with contextlib.suppress(OSError):  # gone, or (a stuck actor with a full buffer) not taking replies
            conn.send(data, socket.MSG_DONTWAIT)

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while True:
                conn, _ = self.sock.accept()
                conn.setblocking(False)
                self.conns[conn.fileno()] = conn
                self.epoll.register(conn.fileno(), select.EPOLLIN)

    def _drop(self, fd: int) -> None:
        self.epoll.unregister(fd)
        self.conns.pop(fd).close()

    def close(self) -> None:
        for fd in list(self.conns):
            self._drop(fd)
        self.epoll.close()
        self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(Path(self.path).parent)  # the last server of the run on this node removes the directory


class Connection:
    """An actor's end: one connection to its policy handler's listener. A server that goes away (at a run's
    stop, policy workers may end before actors; or killed, to be replaced) sets `server_gone`: sends go
    nowhere and replies never come until the client connects again."""

    def __init__(self, path: str, server_may_be_away: bool = False) -> None:
        """`server_may_be_away`: no server listening is not an error (a replaced actor whose policy worker is
        being replaced too): the connection starts gone."""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.server_gone = False
        try:
            self.sock.connect(path)
        except OSError as e:
            if not server_may_be_away:
                self.sock.close()
                raise ConnectionError(f"no inference server listens at {path}: {e}") from None
            self.server_gone = True
        self.poller = select.poll()
        self.poller.register(self.sock.fileno(), select.POLLIN)

    def send(self, data: bytes) -> None:
        if self.server_gone:
            return
        try:
            self.sock.send(data)
        except (BrokenPipeError, ConnectionResetError):
            self.server_gone = True

    def recv(self, timeout_ms: int) -> bytes | None:
        """The next message, or None after `timeout_ms` without one."""
        if self.server_gone:
            return None
        if not self.poller.poll(timeout_ms):
            return None
        try:
            data = self.sock.recv(MAX_MESSAGE)
        except ConnectionResetError:
            data = b""
        if not data:
            self.server_gone = True
        return data or None

    def close(self) -> None:
        self.sock.close()
