"""dpfl.allocator: freed memory kept for reuse — far fewer page faults, the same numbers.

Each case runs in a fresh interpreter: the malloc settings hold for the whole process."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")


def _child(code: str, keep: bool) -> dict:
    prelude = "import json, resource, torch\nfrom dpfl.allocator import keep_freed_memory\n"
    prelude += "kept = keep_freed_memory()\n" if keep else "kept = None\n"
    out = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


FAULTS = """
torch.set_num_threads(1)
def churn(times=20):
    for _ in range(times):
        torch.empty(16 * 2**20).fill_(1.0)          # 64 MiB: above glibc's largest mmap threshold
churn(10)                                           # the heap settles
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


@glibc
def test_a_fresh_large_tensor_no_longer_faults_its_pages_in():
    default, kept = _child(FAULTS, keep=False), _child(FAULTS, keep=True)
    assert kept["kept"] is True
    # by default every page of every tensor faults (20 × 16 384 4-KiB pages; fewer where the kernel
    # backs them with huge pages, at least one per tensor); kept, the same block is reused
    assert default["faults"] >= 20 and kept["faults"] * 20 < default["faults"], (default, kept)


TRAIN = """
import hashlib
from dpfl.federated.local import LocalConfig, client_generators, init_state, local_train
from dpfl.models import MNIST_CNN
torch.set_num_threads(1)
m = 9                                                      # fc1 stacked over 9 clients: 42 MiB
p = MNIST_CNN.init(torch.Generator().manual_seed(0))
st = {k: v.unsqueeze(0).repeat(m, *[1] * v.ndim) for k, v in p.items()}
x = torch.randn(m, 2, 16, 1, 28, 28, generator=torch.Generator().manual_seed(1))
y = torch.randint(0, 10, (m, 2, 16), generator=torch.Generator().manual_seed(2))
cfg = LocalConfig(dp=True, noise_multiplier=1.5)
out, opt = local_train(MNIST_CNN, cfg, st, init_state(st, cfg), x, y, client_generators(0, 0, range(m)))
h = hashlib.sha256()
for k in sorted(out):
    h.update(out[k].numpy().tobytes()); h.update(opt["v"][k].numpy().tobytes())
print(json.dumps({"kept": kept, "sha": h.hexdigest()}))
"""


@glibc
def test_training_computes_the_same_bits_with_freed_memory_kept():
    default, kept = _child(TRAIN, keep=False), _child(TRAIN, keep=True)
    assert kept["kept"] is True and kept["sha"] == default["sha"]
