"""``attach`` and ``collect`` across nodes (``--slurm-job``, ``--ssh``, ``--k8s-pods``,
``--k8s-selector``): fan out, then merge what came back.

Takes typed options and returns values, as ``pipeline`` does; only ``cli.py`` prints or exits.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

from hangscope.cluster.clocks import record_clock_offsets
from hangscope.cluster.remote import RemoteOptions, fan_out_remote
from hangscope.cluster.runner import FanoutResult, node_gaps
from hangscope.cluster.slurm import FanoutOptions, fan_out
from hangscope.errors import CollectError
from hangscope.options import LoadOptions, OutputOptions
from hangscope.result import Summary


def run_slurm_collect(fan: FanoutOptions) -> FanoutResult:
    """Bundles only, one per node under ``fan.out_dir``; CollectError when no node sent one."""
    return _some(fan_out(fan))


def run_slurm_attach(fan: FanoutOptions, load: LoadOptions, output: OutputOptions) -> Summary:
    """Collect on every node into ``OUT/bundles/<node>``, then analyze the bundles together, with
    one evidence gap per node that did not answer; the verdict lands in ``OUT``."""
    return _attach(lambda bundles: run_slurm_collect(dataclasses.replace(fan, out_dir=bundles)),
                   load, output)


def run_remote_collect(fan: RemoteOptions) -> FanoutResult:
    """Bundles only, one per host or pod under ``fan.out_dir``; CollectError when none sent
    one."""
    return _some(fan_out_remote(fan))


def run_remote_attach(fan: RemoteOptions, load: LoadOptions, output: OutputOptions) -> Summary:
    """As ``run_slurm_attach``, over ssh hosts or Kubernetes pods."""
    return _attach(lambda bundles: run_remote_collect(dataclasses.replace(fan, out_dir=bundles)),
                   load, output)


def _attach(collect: Callable[[str], FanoutResult], load: LoadOptions,
            output: OutputOptions) -> Summary:
    from hangscope.pipeline import analyze_evidence, prepare_out_dir
    from hangscope.sources.load import load_paths

    started = time.monotonic()
    out = prepare_out_dir(output)
    result = collect(os.path.join(out, "bundles"))
    evidence, report = load_paths(result.bundles, load)
    gaps = node_gaps(result, set(evidence.ranks), evidence.expected_world_size())
    evidence.gaps[:0] = gaps  # first: the reader should see the missing node before details
    analyzed = analyze_evidence(evidence, output, out)
    analyzed.load_report = report
    summary = analyzed.summary()
    summary.collect_tally = result.tally()
    summary.seconds = time.monotonic() - started
    return summary


def _some(result: FanoutResult) -> FanoutResult:
    if not result.bundles:
        raise CollectError(result.nothing())
    record_clock_offsets(result)
    return result
