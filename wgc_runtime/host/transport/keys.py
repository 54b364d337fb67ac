"""ZeroMQ CURVE for one deployment: its keys, which socket gets which, and who may connect.

When the placement names hosts (or when asked), the launcher makes a fresh `Keys` per run and
hands it to every child with its boot settings (the spawn pipe; on Ray, the actor call), never
over a ZeroMQ socket. Three key pairs:

* the **server** pair: every socket that binds (each process's inbox, the conductor's client
  port) is a CURVE server with it, so a peer must know its public key to even finish the
  handshake, and everything after the handshake is encrypted and authenticated;
* the **peer** pair: what the deployment's own processes connect with; an inbox accepts no other
  key (ZAP domain ``wgc-inbox``);
* the **client** pair: what clients connect with (`wgc_runtime.host.client.Client`, the HTTP
  server's gateway); the client port accepts it (ZAP domain ``wgc-client``) and the peer pair,
  and no inbox accepts it, so a client can submit requests but cannot speak for a rank.

`ClientKey` is the part a client needs (the server's public key and the client pair), saved by
`ClientKey.save` in a file only its owner can read (``wgc serve`` prints its path) and read back
by `ClientKey.load`.

Each process checks the keys of connecting peers in a ZAP handler (`Authenticator`, one thread
per ZeroMQ context, started with the first CURVE server socket): a connection with another key
is refused during the handshake and counted (`Authenticator.refused`); it never delivers a frame.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from typing import Any

import zmq
import zmq.auth.thread

INBOX_DOMAIN = "wgc-inbox"
CLIENT_DOMAIN = "wgc-client"


@dataclass(frozen=True, slots=True)
class ClientKey:
    """What a client needs to reach a CURVE deployment (z85 text)."""

    server_public: str
    public: str
    secret: str

    def apply(self, sock: zmq.Socket) -> None:
        """Make ``sock`` (before it connects) a CURVE client of the deployment."""
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public.encode())
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public.encode())
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret.encode())

    def save(self, path: str | os.PathLike) -> str:
        """Write the key to ``path`` (mode 0600: readable by its owner only); the path."""
        path = os.fspath(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(self), f)
        os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> ClientKey:
        """The key `save` wrote (ValueError, naming the file, when it is not one)."""
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
            return cls(str(raw["server_public"]), str(raw["public"]), str(raw["secret"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"`{os.fspath(path)}` is not a wgc client key: {exc}") from None


@dataclass(frozen=True, slots=True)
class Keys:
    """A deployment's CURVE keys (z85 text; see the module docstring)."""

    server_public: str
    server_secret: str
    peer_public: str
    peer_secret: str
    client_public: str
    client_secret: str

    @classmethod
    def generate(cls) -> Keys:
        if not zmq.has("curve"):
            raise RuntimeError(
                "this libzmq was built without CURVE: it cannot authenticate peers across hosts"
            )
        pairs = [zmq.curve_keypair() for _ in range(3)]
        return cls(*(k.decode() for pair in pairs for k in pair))

    def boot(self) -> dict[str, str]:
        """As handed to a child (plain strings)."""
        return asdict(self)

    @classmethod
    def of_boot(cls, raw: dict[str, Any] | None) -> Keys | None:
        return cls(**raw) if raw else None

    @property
    def client(self) -> ClientKey:
        return ClientKey(self.server_public, self.client_public, self.client_secret)

    @property
    def peer(self) -> ClientKey:
        return ClientKey(self.server_public, self.peer_public, self.peer_secret)

    def serve(self, sock: zmq.Socket, domain: str) -> None:
        """Make ``sock`` (before it binds) a CURVE server whose connecting peers the process's
        ZAP handler checks under ``domain``."""
        Authenticator.of(sock.context, self)
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.server_secret.encode())
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.server_public.encode())
        sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())


class _Allowed:
    """pyzmq's credentials-provider protocol: which client keys a domain accepts."""

    def __init__(self, auth: Authenticator, keys: set[str]) -> None:
        self.auth = auth
        self.keys = {k.encode() for k in keys}

    def callback(self, _domain: str, key: bytes) -> bool:
        if key in self.keys:
            return True
        with self.auth.lock:
            self.auth.refused += 1
        return False


class Authenticator:
    """The ZAP handler of one ZeroMQ context (see the module docstring)."""

    def __init__(self, ctx: zmq.Context, keys: Keys) -> None:
        self.keys = keys
        self.refused = 0
        self.lock = threading.Lock()
        self._thread = zmq.auth.thread.ThreadAuthenticator(ctx)
        self._thread.start()
        self._thread.configure_curve_callback(INBOX_DOMAIN, _Allowed(self, {keys.peer_public}))
        clients = {keys.client_public, keys.peer_public}
        self._thread.configure_curve_callback(CLIENT_DOMAIN, _Allowed(self, clients))

    @classmethod
    def of(cls, ctx: zmq.Context, keys: Keys) -> Authenticator:
        """The context's handler, started on first use (one per context: ZeroMQ has one ZAP
        endpoint per context)."""
        with _CREATE:
            auth = _BY_CONTEXT.get(id(ctx))
            if auth is None:
                auth = _BY_CONTEXT[id(ctx)] = cls(ctx, keys)
            elif auth.keys != keys:
                raise RuntimeError("one ZeroMQ context cannot serve two deployments' keys")
            return auth

    @staticmethod
    def refused_in(ctx: zmq.Context) -> int:
        """Connections the context's handler refused (0 where it has none)."""
        auth = _BY_CONTEXT.get(id(ctx))
        return auth.refused if auth is not None else 0

    @staticmethod
    def release(ctx: zmq.Context) -> None:
        """Stop the context's handler, if it has one (its deployment ended: the launcher's
        `Cluster.stop`, so that the process can start another deployment)."""
        with _CREATE:
            auth = _BY_CONTEXT.pop(id(ctx), None)
        if auth is not None:
            auth._thread.stop()


# ZeroMQ has one ZAP endpoint per context, so one handler per context: id(context) -> handler
_BY_CONTEXT: dict[int, Authenticator] = {}
_CREATE = threading.Lock()
