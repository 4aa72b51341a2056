"""A rank that lies to its peers in ddprun_inprocess's state agreement (tests/python/
inprocess_module_test.cc), installed by inprocess_worker.py --hostile ATTACK --marker PATH.

From round --lie-from-round on it claims step 10**15, so that it is taken as the source wherever
the module lets it; as the source it sends, instead of its state:

  pickle  a pickle whose loading creates PATH (the marker): the whole payload in the format of
          the module it runs with (the skeleton pickle of the first version of the module; the
          metadata of the later format);
  size    a header announcing 10**15 bytes of state, then nothing.

Where it is not the source it takes the state like any rank. Nothing here is the module's code:
it drives the same collectives by hand, as a rank that runs its own code would.
"""
import os
import pickle

import torch
import torch.distributed as dist

HUGE = 10**15


class _Marker:
    """Unpickled, it opens (creates) the marker file: code of the sender's choice, run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _broadcast_ints(values, src, device):
    dist.broadcast(torch.tensor(values, dtype=torch.int64, device=device), src)


def _broadcast_bytes(data, src, device):
    dist.broadcast(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device), src)


def _send(dip, attack, marker, src, device):
    evil = pickle.dumps({"note": _Marker(marker)}, protocol=2)
    new_format = hasattr(dip, "STATE_FORMAT_VERSION")
    if new_format:
        magic, version = dip._STATE_MAGIC, dip.STATE_FORMAT_VERSION
        if attack == "pickle":
            _broadcast_ints([magic, version, 0, len(evil), 0, 0], src, device)
            _broadcast_bytes(evil, src, device)
        else:
            _broadcast_ints([magic, version, 0, 100, HUGE, 1], src, device)
        return
    # The first version: a count, a header [skeleton bytes, n, sizes...], the payload.
    if attack == "pickle":
        _broadcast_ints([2], src, device)
        _broadcast_ints([len(evil), 0], src, device)
        _broadcast_bytes(evil, src, device)
    else:
        _broadcast_ints([3], src, device)
        _broadcast_ints([16, 1, HUGE], src, device)


def install(dip, attack, marker, lie_from_round):
    agree, broadcast_state = dip._agree, dip._broadcast_state

    def lying_agree(state, step, backend, *args, **kwargs):
        if int(os.environ.get("DDPRUN_ROUND", "0")) >= lie_from_round:
            step = HUGE
        return agree(state, step, backend, *args, **kwargs)

    def hostile_broadcast_state(state, src, device, *args, **kwargs):
        if dist.get_rank() != src:
            return broadcast_state(state, src, device, *args, **kwargs)
        print(f"hostile rank {src}: sending the {attack} attack", flush=True)
        return _send(dip, attack, marker, src, device)

    dip._agree = lying_agree
    dip._broadcast_state = hostile_broadcast_state
