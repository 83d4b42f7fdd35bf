"""A TCP proxy on loopback in front of a PostgreSQL server's Unix socket that can cut the
network as a vanished host or a pulled cable does: nothing is closed, nothing is refused,
nothing is answered.

`cut()` attaches to each of the proxy's sockets (the listening one and every accepted one)
a classic BPF socket filter that keeps no packet (SO_ATTACH_FILTER, allowed to any user):
the kernel drops what reaches them before TCP sees it, so the client's data, its
keepalive probes and its new connections' SYNs are never acknowledged (no ACK, no RST, no
FIN), and the proxy stops forwarding either way. A proxy that merely stopped reading would
not do: its kernel would still acknowledge the data and answer the probes, and the client
would see a live connection. `heal()` takes the filters off and forwards again, as a
network does when it comes back (a client that gave the connection up meanwhile gets a
reset the first time the proxy writes to it)."""
import asyncio
import contextlib
import ctypes
import socket
import struct
import threading

SO_ATTACH_FILTER = 26
SO_DETACH_FILTER = 27

# One classic BPF instruction, `ret #0` (BPF_RET | BPF_K): keep 0 bytes of every packet.
_KEEP_NOTHING = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0), 8)
# struct sock_fprog { unsigned short len; struct sock_filter *filter; }
_PROGRAM = struct.pack("HP", 1, ctypes.addressof(_KEEP_NOTHING))


def _drop_every_packet(sock):
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, _PROGRAM)


def _take_packets_again(sock):
    with contextlib.suppress(OSError):  # a socket closed meanwhile
        sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)


class BlackHoleProxy:
    """Forwards 127.0.0.1:`port` to the Unix socket at `unix_path`, on a thread of its own
    (asyncio), until `close()`; `cut()` and `heal()` the network between them."""

    def __init__(self, unix_path):
        self.unix_path = str(unix_path)
        self.loop = asyncio.new_event_loop()
        self.flowing = None  # an asyncio.Event, set while the network works
        self.sockets = set()  # the listening socket and the accepted ones, to filter
        self.tasks = set()  # the accepting one, and one per connection until it ends
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.sockets.add(self.listener)
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(10)

    def _run(self, started):
        asyncio.set_event_loop(self.loop)
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.loop.call_soon(started.set)
        self._track(self.loop.create_task(self._accept()))
        self.loop.run_forever()

    def _track(self, task):
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _accept(self):
        while True:
            client, _ = await self.loop.sock_accept(self.listener)
            if not self.flowing.is_set():  # accepted just before the cut: cut too
                _drop_every_packet(client)
            self.sockets.add(client)
            self._track(self.loop.create_task(self._connect(client)))

    async def _connect(self, client):
        server = socket.socket(socket.AF_UNIX)
        server.setblocking(False)
        try:
            await self.loop.sock_connect(server, self.unix_path)
            await asyncio.gather(self._pump(client, server), self._pump(server, client))
        except OSError:
            pass
        finally:
            self.sockets.discard(client)
            client.close()
            server.close()

    async def _pump(self, source, destination):
        """Copies `source` to `destination` while the network works; waits while it is cut.
        The end of either side ends both."""
        try:
            while True:
                await self.flowing.wait()
                data = await self.loop.sock_recv(source, 65536)
                await self.flowing.wait()  # what was read just as the network was cut waits
                if not data:
                    break
                await self.loop.sock_sendall(destination, data)
        finally:
            with contextlib.suppress(OSError):
                source.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                destination.shutdown(socket.SHUT_RDWR)

    def _in_loop(self, function):
        done = threading.Event()

        def call():
            try:
                function()
            finally:
                done.set()

        self.loop.call_soon_threadsafe(call)
        assert done.wait(10), "the proxy's loop did not answer"

    def url(self, database):
        """A libpq URI for `database` as the superuser, through the proxy."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def cut(self):
        """From now on, every packet to the proxy is dropped and nothing is forwarded."""
        def cut():
            self.flowing.clear()
            for sock in self.sockets:
                _drop_every_packet(sock)
        self._in_loop(cut)

    def heal(self):
        """The network works again: packets are taken, and forwarding goes on."""
        def heal():
            for sock in self.sockets:
                _take_packets_again(sock)
            self.flowing.set()
        self._in_loop(heal)

    async def _stop(self):
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.listener.close()

    def close(self):
        """Closes every connection and the listening socket, and ends the thread."""
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()
