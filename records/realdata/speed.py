"""Time one training epoch of an 8-expert MoE on the full Fashion-MNIST training set (60,000 images).

Issue 8's speed requirement: under a minute per epoch on 2 CPU cores.  This script sets
``torch.set_num_threads(2)`` (only here, for the measurement), trains one epoch per gate and
architecture with batch 256, and writes ``speed.json`` beside itself (or to ``--out``) with the
machine's load average before and after, so that the conditions are on record; ``cpu_seconds`` (process CPU time, all threads) is the
figure that does not depend on what else runs on the machine.

    python records/realdata/speed.py [--threads 2] [--gates dense,noisy_topk_load] [--out FILE]
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch

from moestat.cli.common import ArgumentParser, name_choice, positive_int
from moestat.data.images import load_dataset
from moestat.io import atomic_write_json
from moestat.nn.classifier import count_parameters, fit_classifier
from moestat.experiments.realdata import GATE_SPECS, build_model

ARCHS = {
    "experts-64": dict(expert_hidden=64),
    "shared-256+experts-32": dict(shared_hidden=256, expert_hidden=32),
}


def main(argv: list[str] | None = None) -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])  # the doors' parser: a bad option is one line, exit 2
    ap.add_argument("--threads", type=positive_int, default=2, help="torch threads of the measurement")
    ap.add_argument("--gates", type=name_choice(tuple(GATE_SPECS), many=True),  # an unknown gate: refused before the data load
                    default="dense,noisy_topk_load,perturbed,softmoe", help="comma list of gates to time")
    ap.add_argument("--out", default=str(Path(__file__).with_name("speed.json")), help="the JSON written")
    a = ap.parse_args(argv)
    if not Path(a.out).parent.is_dir():  # refused before the epochs, not after them
        ap.error(f"--out {a.out}: no folder {Path(a.out).parent}")
    torch.set_num_threads(a.threads)
    ds = load_dataset("fashion-mnist", val_fraction=0.0)  # all 60,000 training images
    t = ds.tensors()
    rows = []
    load_before = os.getloadavg()
    for arch, kw in ARCHS.items():
        for gate in a.gates:
            if gate == "softmoe":
                if arch != "experts-64":
                    continue
            model = build_model(gate, ds, n_experts=8, k=2, random_state=0, **kw)
            t0, c0 = time.perf_counter(), time.process_time()
            fit = fit_classifier(model, t["X_train"], t["y_train"], epochs=1, batch_size=256, random_state=0, progress=False)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rows.append({"gate": gate, "architecture": arch if gate != "softmoe" else "4 patches 14x14, budget 4",
                         "n_params": count_parameters(model), "n_train": len(ds.y_train),
                         "epoch_seconds": fit.seconds_per_epoch, "wall_seconds": wall, "cpu_seconds": cpu,
                         "train_loss": fit.history[-1]["train_loss"]})
            print(f"{gate:18s} {arch:22s} {fit.seconds_per_epoch:6.1f} s/epoch (wall), {cpu:6.1f} s CPU, "
                  f"params {rows[-1]['n_params']}", flush=True)
    atomic_write_json(a.out, {
        "threads": a.threads, "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "torch": torch.__version__, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "batch_size": 256, "n_experts": 8, "k": 2, "rows": rows,
    })


if __name__ == "__main__":
    main()
