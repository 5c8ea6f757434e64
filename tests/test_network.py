"""Which address a worker binds and advertises (srl_hpc.services.network), on this machine's interfaces;
on the local Slurm's nodes, with their eth0 and ib0, the Slurm tests show the rest."""

import pytest

from srl_hpc.services import network


def test_an_interface_by_name_or_by_network_and_what_the_libraries_are_told():
    assert network.resolve("lo") == network.Address("127.0.0.1", "lo", "slurm.network: lo")
    by_cidr = network.resolve("127.0.0.0/8")
    assert by_cidr.ip == "127.0.0.1" and by_cidr.interface == "lo" and by_cidr.loopback
    named = network.Address("10.250.1.11", "ib0", "slurm.network: ib0")
    assert network.library_environment(named) == {
        "OMPI_MCA_btl_tcp_if_include": "ib0",
        "OMPI_MCA_oob_tcp_if_include": "ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
        "NCCL_SOCKET_IFNAME": "ib0",
    }
    assert network.library_environment(by_cidr) == {}  # loopback: nothing to steer


def test_a_sites_exclude_list_keeps_our_include_list_out_of_that_transport(tmp_path, monkeypatch):
    """Open MPI refuses btl_tcp_if_include beside btl_tcp_if_exclude: where a site sets the exclude list (here in
    an MCA parameter file, as sites do), the include list for that transport is not set."""
    conf = tmp_path / "openmpi-mca-params.conf"
    conf.write_text("# site settings\nbtl_tcp_if_exclude = lo,docker0\n#oob_tcp_if_exclude = lo\n")
    site = network.site_mca_parameters([str(conf)])
    assert "btl_tcp_if_exclude" in site and "oob_tcp_if_exclude" not in site
    env = network.library_environment(network.Address("10.250.1.11", "ib0", "slurm.network: ib0"), site)
    assert "OMPI_MCA_btl_tcp_if_include" not in env and env["OMPI_MCA_oob_tcp_if_include"] == "ib0"
    monkeypatch.setenv("OMPI_MCA_oob_tcp_if_exclude", "lo")  # the same from the environment
    env = network.library_environment(
        network.Address("10.250.1.11", "ib0", "slurm.network: ib0"), network.site_mca_parameters([str(conf)])
    )
    assert not any(k.startswith("OMPI_MCA") for k in env) and env["GLOO_SOCKET_IFNAME"] == "ib0"


def test_a_users_own_interface_variables_win(monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=mlx5_0")
    env = network.library_environment(network.Address("10.250.1.11", "ib0", "slurm.network: ib0"))
    assert "NCCL_SOCKET_IFNAME" not in env and env["GLOO_SOCKET_IFNAME"] == "ib0"


@pytest.mark.parametrize(
    "setting, says", [("nosuch0", "that interface does not exist"), ("198.51.100.0/24", "no interface of node")]
)
def test_a_network_this_node_lacks_is_an_error_that_lists_its_interfaces(setting, says):
    with pytest.raises(network.NetworkError) as info:
        network.resolve(setting)
    message = str(info.value)
    assert f"slurm.network is {setting!r}" in message and says in message and "lo 127.0.0.1" in message


def test_the_loopback_message_names_the_setting_and_the_nodes_interfaces():
    text = network.loopback_message("actor/3", network.Address("127.0.1.1", None, "hostname n2"))
    assert "actor/3 on node" in text and "would advertise 127.0.1.1 (no interface; hostname n2)" in text
    assert "Set slurm.network to the interface" in text and "lo 127.0.0.1" in text
