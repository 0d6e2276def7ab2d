"""second_run_env: a second run of a torchrun job beside the first, its ranks meeting on a port of their own."""

from __future__ import annotations

import socket

import pytest

from nsightwrap.watch.launchers import free_port, second_run_env


def test_torchrun_gets_a_free_port_of_its_own():
    env, why = second_run_env(["torchrun", "--standalone", "--nproc-per-node=2", "train.py", "--lr", "1"], {})
    port = int(env["PET_MASTER_PORT"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nothing listens there
    assert "port of its own" in why
    env, _ = second_run_env(["python3", "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "pkg"],
                            {"MASTER_PORT": "29500", "PET_MASTER_PORT": "29500"})
    assert env["PET_MASTER_PORT"] != "29500"


@pytest.mark.parametrize("command, env, word", [
    (["torchrun", "--master-port", "29600", "--nproc-per-node", "2", "t.py"], {}, "--master-port"),
    (["torchrun", "--rdzv_endpoint=host:29400", "--nproc-per-node", "2", "t.py"], {}, "--rdzv_endpoint"),
    (["torchrun", "--nnodes", "2", "--nproc-per-node", "2", "t.py"], {}, "--nnodes 2"),
    (["torchrun", "--nnodes", "1:2", "--nproc-per-node", "2", "t.py"], {}, "--nnodes 1:2"),
    (["torchrun", "--nproc-per-node", "2", "t.py"], {"PET_RDZV_ENDPOINT": "h:1"}, "PET_RDZV_ENDPOINT"),
    (["torchrun", "--nproc-per-node", "2", "t.py"], {"NCCL_COMM_ID": "h:1234"}, "NCCL_COMM_ID"),
    (["mpirun", "-np", "2", "./a.out"], {}, "only torchrun"),
    (["./a.out"], {}, "no launcher"),
    (["torchrun", "--frobnicate", "2", "t.py"], {}, "not one nsightwrap knows"),
])
def test_a_launch_whose_ranks_cannot_be_kept_apart_gets_none_and_why(command, env, word):
    got, why = second_run_env(command, env)
    assert got is None and word in why


def test_one_node_written_out_is_one_node():
    assert second_run_env(["torchrun", "--nnodes", "1", "--nproc-per-node", "2", "t.py"], {})[0] is not None
    assert second_run_env(["torchrun", "--nnodes=1:1", "--nproc-per-node", "2", "t.py"], {})[0] is not None


def test_free_port_is_free():
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
