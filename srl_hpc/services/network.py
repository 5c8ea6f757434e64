"""Which address a worker advertises and binds on: resolved in each worker process, on its own node.

On a cluster a node often has several interfaces (a management Ethernet, InfiniBand, docker0...), and its
hostname may resolve to a loopback address (Debian's 127.0.1.1). `slurm.network` names the interface
(`ib0`) or the network (`10.1.0.0/16`) the workers should use; without it, the address the node's
hostname resolves to. The interface found also goes to Open MPI, gloo and NCCL, which otherwise pick
their own, so that every byte of a run crosses the network the user chose.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass

import psutil

SETTING = "slurm.network"


class NetworkError(RuntimeError):
    pass


@dataclass(frozen=True)
class Address:
    ip: str
    interface: str | None  # None: the hostname's address is on no interface of this node (unusual)
    source: str  # how it was chosen, for the log: "slurm.network: ib0", "hostname n1"

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.ip).is_loopback

    def describe(self) -> str:
        return f"{self.ip} ({self.interface or 'no interface'}; {self.source})"


def interfaces() -> dict[str, list[str]]:
    """This node's IPv4 addresses per interface name."""
    return {
        name: [a.address for a in addrs if a.family == socket.AF_INET] for name, addrs in psutil.net_if_addrs().items()
    }


def resolve(network: str | None) -> Address:
    """The address named by `network` (an interface name or a CIDR) on this node, or the hostname's."""
    found = interfaces()
    if network is None:
        host = socket.gethostname()
        try:
            ip = socket.gethostbyname(host)
        except OSError as e:
            raise NetworkError(
                f"this node's hostname {host!r} does not resolve ({e}); set {SETTING} to the "
                f"interface or network the workers should use ({_listing(found)})"
            ) from None
        return Address(ip, _interface_of(ip, found), f"hostname {host}")
    if "/" in network:
        net = ipaddress.ip_network(network, strict=False)
        for name, ips in sorted(found.items()):
            for ip in ips:
                if ipaddress.ip_address(ip) in net:
                    return Address(ip, name, f"{SETTING}: {network}")
        raise NetworkError(
            f"{SETTING} is {network!r}, but no interface of node {socket.gethostname()} has an "
            f"address in it ({_listing(found)})"
        )
    if not found.get(network):
        problem = "has no IPv4 address" if network in found else "does not exist"
        raise NetworkError(
            f"{SETTING} is {network!r}, but that interface {problem} on node {socket.gethostname()} ({_listing(found)})"
        )
    return Address(found[network][0], network, f"{SETTING}: {network}")


def _interface_of(ip: str, found: dict[str, list[str]]) -> str | None:
    return next((name for name, ips in sorted(found.items()) if ip in ips), None)


def _listing(found: dict[str, list[str]]) -> str:
    return "its interfaces: " + ", ".join(f"{n} {'/'.join(ips) or '-'}" for n, ips in sorted(found.items()))


def loopback_message(worker: str, address: Address) -> str:
    return (
        f"{worker} on node {socket.gethostname()} would advertise {address.describe()}, a loopback address "
        f"that workers on the job's other nodes cannot reach. Set {SETTING} to the interface (e.g. ib0) or "
        f"network (e.g. 10.0.0.0/8) that connects the nodes ({_listing(interfaces())})"
    )


LOCAL = Address("127.0.0.1", "lo", "local mode")


def library_environment(address: Address, site: set[str] | None = None) -> dict[str, str]:
    """The variables that make Open MPI's TCP transport, gloo and NCCL use the chosen interface. A value the
    user set already wins (os.environ is left as it is for those). Where the site excludes interfaces from an
    Open MPI transport (`btl_tcp_if_exclude`, in the environment or an MCA parameter file: `site`, by default
    read here), that transport is left to it: Open MPI refuses an include list beside an exclude list."""
    if address.interface is None or address.loopback:
        return {}
    site = site_mca_parameters() if site is None else site
    wanted = {"GLOO_SOCKET_IFNAME": address.interface, "NCCL_SOCKET_IFNAME": address.interface}
    for transport in ("btl_tcp", "oob_tcp"):
        if f"{transport}_if_exclude" not in site:
            wanted[f"OMPI_MCA_{transport}_if_include"] = address.interface
    return {k: v for k, v in wanted.items() if k not in os.environ}


MCA_PARAMETER_FILES = (
    "~/.openmpi/mca-params.conf",
    "/etc/openmpi/openmpi-mca-params.conf",  # the user's; Debian's
    "$OPAL_PREFIX/etc/openmpi-mca-params.conf",
)  # a module's Open MPI
MCA_PREFIX = "OMPI_MCA_"


def site_mca_parameters(files=MCA_PARAMETER_FILES) -> set[str]:
    """The Open MPI parameters set for this process, by name: OMPI_MCA_* variables and `name = value` lines."""
    names = {k[len(MCA_PREFIX) :] for k in os.environ if k.startswith(MCA_PREFIX)}
    for path in files:
        path = os.path.expanduser(os.path.expandvars(path))
        try:
            with open(path) as f:
                names |= {line.split("=")[0].strip() for line in f if "=" in line and not line.lstrip().startswith("#")}
        except OSError:
            continue
    return names
