"""The state hand-over format of ddprun_inprocess, without processes or collectives
(tests/python/inprocess_module_test.cc runs it with torch 1.13 and 2.11).

A real model's and optimizer's state goes through pack, header check, metadata parse, decode and
load bit for bit; every kind of malformed input a peer could send is refused with StateError
before anything is built or allocated; values the format cannot carry are named on the sending
side; the choice of the source refuses a step that cannot be true. Prints "ok: N checks" and
exits 0, or names the first failed check and exits 1.
"""
import collections
import json
import os
import sys

import torch

import ddprun_inprocess as dip
import script_checks
from script_checks import check



def raises(fn, needle, what):
    try:
        fn()
    except dip.StateError as e:
        check(needle in str(e), f"{what}: StateError {str(e)!r} lacks {needle!r}")
        return
    except Exception as e:  # anything else is a failure of the check
        check(False, f"{what}: {type(e).__name__}: {e} instead of StateError")
    check(False, f"{what}: accepted")


LIMIT = (1 << 30, "the test's limit")


def receive(header, meta, payload, state, limit=LIMIT):
    meta_len, tensor_bytes, count = dip._check_header(header, 7, limit)
    check(meta_len == len(meta), "meta length")
    obj, layout = dip._parse_meta(meta, 7, count, tensor_bytes)
    dip._load_state(state, dip._decode_state(obj, layout, payload, 7), 7)


def send(state):
    header, meta, raws = dip._pack_state(state, torch.device("cpu"))
    payload = torch.cat(raws) if raws else torch.empty(0, dtype=torch.uint8)
    return header, meta, payload


def build(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, opt


for name, (dtype, size) in dip._DTYPES.items():
    check(torch.empty(0, dtype=dtype).element_size() == size, f"the size of {name}")

# A trained model and optimizer, and plain values of every allowed kind, arrive bit for bit.
model, opt = build(0)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(5, 3)).pow(2).sum().backward()
    opt.step()
plain = {
    "none": None, "flag": True, "n": -(2**70), "x": 0.1, "nan": float("nan"), "s": "é\n",
    "b": b"\x00\xff", "list": [1, [2.5, "a"]], "tuple": (1, (2,)), "dtype": torch.bfloat16,
    "size": torch.Size([2, 3]), "od": collections.OrderedDict([(3, "c"), ((1, "k"), None)]),
    "keys": {None: 1, False: 2, 1.5: 3, "k": 4},
    "tensors": [torch.arange(6, dtype=torch.int16).view(2, 3).t(), torch.tensor(True),
                torch.zeros(0, 4), torch.tensor(2.5, dtype=torch.float64),
                torch.tensor([1 + 2j], dtype=torch.complex64)],
}
src = {"model": model, "optimizer": opt, "plain": plain}
dst_model, dst_opt = build(1)
dst = {"model": dst_model, "optimizer": dst_opt, "plain": None}
receive(*send(src), dst)
for (k, a), b in zip(model.state_dict().items(), dst_model.state_dict().values()):
    check(a.dtype == b.dtype and torch.equal(a, b), f"model {k} bit for bit")
check(dst_model.state_dict()._metadata == model.state_dict()._metadata, "_metadata carried")
sa, sb = opt.state_dict(), dst_opt.state_dict()
check(sa["param_groups"] == sb["param_groups"], "optimizer param_groups")
for p in sa["state"]:
    for k, v in sa["state"][p].items():
        w = sb["state"][p][k]
        check(torch.equal(v, w) if torch.is_tensor(v) else v == w, f"optimizer state {p}.{k}")
got = dst["plain"]
for k in plain:
    a, b = plain[k], got[k]
    if k == "nan":
        check(b != b, "NaN")
    elif k == "tensors":
        for i, (x, y) in enumerate(zip(a, b)):
            check(x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), f"tensor {i}")
            check(y.is_contiguous(), f"tensor {i} contiguous")
    else:
        check(type(a) is type(b) and a == b, f"plain value {k}: {a!r} != {b!r}")

# Values the format cannot carry: StateError on the sender, naming the value and what is allowed.


class Mine:
    pass


for bad, needle in [
        (lambda: 1, "state['plain']['f']: a function"),
        (Mine(), "a __main__.Mine cannot be handed over"),
        ({1, 2}, "a set cannot"),
        (collections.defaultdict(int), "a collections.defaultdict cannot"),
        (torch.zeros(2).to_sparse(), "torch.sparse_coo"),
        ({frozenset(): 1}, "a dict key of type frozenset"),
]:
    raises(lambda: dip._pack_state({"plain": {"f": bad}}, torch.device("cpu")), needle,
           f"sender refuses {type(bad).__name__}")
raises(lambda: dip._pack_state({"plain": {"f": Mine()}}, torch.device("cpu")), "allowed: dense",
       "the error says what is allowed")
deep = []
for _ in range(100):
    deep = [deep]
raises(lambda: dip._pack_state({"d": deep}, torch.device("cpu")), "nested deeper", "depth")
cyclic = []
cyclic.append(cyclic)
raises(lambda: dip._pack_state({"c": cyclic}, torch.device("cpu")), "nested deeper", "cycle")

# What a peer announces: every size and count checked before anything is allocated.
header, meta, payload = send({"t": torch.ones(4)})
M, V = dip._STATE_MAGIC, dip.STATE_FORMAT_VERSION
for h, needle, what in [
        ([M + 1, V, 0, len(meta), 16, 1], "no state of format", "magic"),
        ([M, V + 1, 0, len(meta), 16, 1], "no state of format", "version"),
        ([M, V, 1, 0, 0, 0], "could not serialise", "source failed"),
        ([M, V, 0, 1, 16, 1], "bytes of metadata", "meta too short"),
        ([M, V, 0, (64 << 20) + 1, 16, 1], "bytes of metadata", "meta too long"),
        ([M, V, 0, len(meta), -1, 1], "tensor bytes", "negative tensor bytes"),
        ([M, V, 0, len(meta), 16, -1], "tensors", "negative count"),
        ([M, V, 0, len(meta), 16, len(meta) + 1], "tensors", "count above meta bytes"),
        ([M, V, 0, len(meta), 10**15, 1], "announces a state of", "a huge state"),
]:
    raises(lambda: dip._check_header(h, 7, LIMIT), needle, f"header: {what}")
raises(lambda: dip._check_header([M, V, 0, len(meta), 2000, 1], 7, (1000, "x")),
       "more than this process takes (1000 bytes: x)", "the limit")
limit = dip._receive_limit(torch.device("cpu"), None)
check(0 < limit[0] < (1 << 50), f"the memory limit {limit}")
check(dip._receive_limit(torch.device("cpu"), 5) == (5, "max_state_bytes"), "max_state_bytes")


def meta_of(obj):
    return json.dumps(obj).encode()


good_specs = [{"dtype": "float32", "shape": [4], "device": "cpu"}]
for m, count, tb, needle, what in [
        (b"\x80\x04\x95 pickle", 1, 16, "invalid state metadata", "a pickle"),
        (b"[" * 100000, 1, 16, "invalid state metadata", "deep JSON"),
        (meta_of([1]), 1, 16, "not a {state, tensors}", "not an object"),
        (meta_of({"state": [], "tensors": good_specs, "x": 1}), 1, 16, "not a {state",
         "extra key"),
        (meta_of({"state": [], "tensors": good_specs}), 2, 16, "announces 2 tensors", "count"),
        (meta_of({"state": [], "tensors": good_specs}), 1, 20, "the header announces 20",
         "fewer bytes than announced"),
        (meta_of({"state": [], "tensors": [{"dtype": "float32", "shape": [10**12],
                                            "device": "cpu"}]}), 1, 16, "needs 4000000000000",
         "a tensor larger than the bytes"),
        (meta_of({"state": [], "tensors": [{"dtype": "object", "shape": [4], "device": "cpu"}]}),
         1, 16, "unknown dtype", "dtype"),
        (meta_of({"state": [], "tensors": [{"dtype": "float32", "shape": [4],
                                            "device": "meta"}]}), 1, 16, "device", "device"),
        (meta_of({"state": [], "tensors": [{"dtype": "float32", "shape": [-4, -1],
                                            "device": "cpu"}]}), 1, 16, "shape", "negative dim"),
        (meta_of({"state": [], "tensors": [{"dtype": "float32", "shape": [1] * 65,
                                            "device": "cpu"}]}), 1, 4, "shape", "too many dims"),
]:
    raises(lambda: dip._parse_meta(m, 7, count, tb), needle, f"metadata: {what}")

four = torch.ones(4).view(torch.uint8)
for state, needle, what in [
        ([["a", {"tensor": 0}], ["b", {"tensor": 0}]], "used twice", "a tensor used twice"),
        ([["a", {"tensor": 1}]], "unknown or used twice", "a tensor index out of range"),
        ([["a", {"eval": "print(1)"}]], "unknown tag", "an unknown tag"),
        ([["a", [1, 2]]], "a bare list", "an untagged list"),
        ([["a", {"dict": [[{"list": []}, 1]]}]], "unhashable key", "an unhashable key"),
        ([["a", {"list": 1}]], "not a JSON array", "a list that is not"),
        ([["a", {"bytes": "%%%"}]], "invalid state", "bad base64"),
        ([["a", {"dtype": "os.system"}]], "unknown dtype", "a dtype by name"),
        ([[1, 2]], "[name, value] pair", "a name that is not a string"),
        ({"a": 1}, "not a list of [name, value]", "a state that is not a list"),
]:
    obj = {"state": state, "tensors": good_specs}
    layout = dip._tensor_layout(good_specs, 1, 16)
    raises(lambda: dip._decode_state(obj, layout, four, 7), needle, f"decode: {what}")
bool_specs = [{"dtype": "bool", "shape": [2], "device": "cpu"}]
raises(lambda: dip._decode_state({"state": [["a", {"tensor": 0}]], "tensors": bool_specs},
                                 dip._tensor_layout(bool_specs, 1, 2),
                                 torch.tensor([0, 7], dtype=torch.uint8), 7),
       "bool bytes", "bool bytes other than 0/1")
m2, o2 = build(2)
raises(lambda: receive(*send({"model": torch.nn.Linear(5, 5)}), {"model": m2}),
       "state['model'] from rank 7: load_state_dict", "a model of other shapes")

# The source: the lowest rank with the highest step, unless that step cannot be true.
for claims, lead, expect, what in [
        ([(4, 1), (4, 1), (-1, 0)], 1, (0, 4), "survivors agree, a replacement"),
        ([(4, 1), (4, 1), (4, 1)], 1, (None, 4), "all equal: nothing moves"),
        ([(-1, 0), (-1, 0)], 1, (None, -1), "first round"),
        ([(4, 1), (5, 1), (-1, 0)], 1, (1, 5), "one step ahead"),
        ([(4, 1), (10**15, 1), (-1, 0)], 1, (0, 4), "a huge claim with a survivor beside it"),
        ([(10**15, 0), (4, 1), (-1, 0)], 1, (1, 4), "a replacement claiming a huge step"),
        ([(4, 1), (9, 1)], 5, (1, 9), "a larger max_step_lead"),
        ([(150, 1), (100, 0)], 1, (0, 150), "one survivor, a replacement from a checkpoint"),
        ([(-1, 0), (10**15, 1)], 1, (1, 10**15), "the only survivor: nothing contradicts it"),
        ([(10**15, 1), (10**15, 1), (3, 1)], 1, (0, 10**15), "two ranks back a claim"),
        ([(4, 1), (-5, 1), (2**63 - 1, 1)], 1, (0, 4), "invalid claims"),
]:
    src_rank, step, refused = dip._choose_source(claims, lead)
    check((src_rank, step) == expect, f"source: {what}: {(src_rank, step)} != {expect}")
_, _, refused = dip._choose_source([(4, 1), (10**15, 1), (-1, 0)], 1)
check(list(refused) == [1] and "claims step 1000000000000000, more than 1 ahead" in refused[1]
      and "rank 0, a survivor, holds step 4" in refused[1], f"the refusal says why: {refused}")

print(f"ok: {script_checks.count()} checks (torch {torch.__version__})", flush=True)
