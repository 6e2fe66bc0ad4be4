"""The API server at the real node's address. The test plane's kube-apiserver listens on loopback only, which
is no address a pod can reach; pods reach the API (an in-cluster coordinator's ServiceAccount) at the
`kubernetes` Service, whose ClusterIP kube-proxy routes to the endpoints it is given. So the node forwards
NODE_IP:PORT to the apiserver's loopback port (TCP, bytes only: TLS stays end to end, and the apiserver's
certificate names the ClusterIP), and an EndpointSlice of the `kubernetes` Service names that address."""

from __future__ import annotations

import socket
import threading

SLICE = "kubernetes-tfdist-real-node"


class Forwarder:
    def __init__(self, listen_host: str, target: tuple[str, int]):
        self.target = target
        self.server = socket.create_server((listen_host, 0))
        self.port = self.server.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="api-forward", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)  # a watch is quiet for long: only the connect is bounded
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._copy, args=(a, b), daemon=True).start()

    def _copy(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._open = self._open, set()
        self.server.close()
        for s in sockets:
            s.close()


def endpoint_slice(address: str, port: int) -> dict:
    """The `kubernetes` Service's endpoint at the forwarder (the plane runs no endpoint reconciler)."""
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": SLICE, "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes",
                                    "endpointslice.kubernetes.io/managed-by": "tfdist-tests"}},
            "addressType": "IPv4", "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}
