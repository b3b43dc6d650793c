"""The benchmarks and GPU checks, one module each; ``scripts/bench_*.py`` and
``scripts/gpu_sync_check.py`` are their command lines (``docs/benchmarks.md``).

- :mod:`topk.bench.losses`: speed and stability of every loss (``make bench-losses``), with
  :mod:`topk.bench.peers`, ours against the published codes;
- :mod:`topk.bench.epochs`: each experiment's training step and sweep compute
  (``make bench-epochs``), its tables in :mod:`topk.bench.epochs_report`;
- :mod:`topk.bench.data`: images per second of the input pipelines (``make bench-data``);
- :mod:`topk.bench.train`: the engine against a bare loop (``make bench``, ``make bench-train``);
- :mod:`topk.bench.startup`: start-up of the entry points (``make bench-startup``);
- :mod:`topk.bench.sync_check`: host-device synchronisations of a training step (``make gpu-check``);
- :mod:`topk.bench.common`, :mod:`topk.bench.timing`: what several of them share.

Like ``train.py`` they compose ``conf/`` with Hydra, so ``import topk`` does not import them.
"""
