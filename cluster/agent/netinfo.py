"""What this node offers: its network addresses (its GPUs: cluster/shared/gpus.py)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess


def discover_addresses(coordinator: str | None = None) -> list[dict]:
    """IPv4 addresses with prefix lengths, from `ip -j addr` (iproute2); falls back to the
    address this node uses to reach the coordinator."""
    addresses: list[dict] = []
    ip_tool = shutil.which("ip")
    if ip_tool:
        try:
            out = subprocess.run([ip_tool, "-j", "-4", "addr", "show"], capture_output=True, text=True, timeout=5)
            for link in json.loads(out.stdout or "[]"):
                for info in link.get("addr_info", []):
                    if info.get("family") == "inet":
                        addresses.append({"ip": info["local"], "prefix_len": int(info.get("prefixlen", 32)),
                                          "interface": link.get("ifname", "")})
        except (OSError, ValueError, subprocess.SubprocessError):
            addresses = []
    if coordinator and not any(not a["ip"].startswith("127.") for a in addresses):
        host = coordinator.rsplit(":", 1)[0]
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((host, 9))  # UDP: sends nothing, just picks the route
                addresses.append({"ip": s.getsockname()[0], "prefix_len": 32, "interface": ""})
        except OSError:
            pass
    if not addresses:
        addresses.append({"ip": "127.0.0.1", "prefix_len": 8, "interface": "lo"})
    return addresses
