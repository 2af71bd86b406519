"""``attach --slurm-job`` and ``collect --slurm-job``: fan out, then merge what came back.

Takes typed options and returns values, as ``pipeline`` does; only ``cli.py`` prints or exits.
"""

from __future__ import annotations

import os
import time

from hangscope.cluster.slurm import FanoutOptions, FanoutResult, fan_out, node_gaps
from hangscope.errors import CollectError
from hangscope.options import LoadOptions, OutputOptions
from hangscope.result import Summary


def run_slurm_collect(fan: FanoutOptions) -> FanoutResult:
    """Bundles only, one per node under ``fan.out_dir``; CollectError when no node sent one."""
    result = fan_out(fan)
    if not result.bundles:
        raise CollectError(_nothing(result))
    return result


def run_slurm_attach(fan: FanoutOptions, load: LoadOptions, output: OutputOptions) -> Summary:
    """Collect on every node into ``OUT/bundles/<node>``, then analyze the bundles together, with
    one evidence gap per node that did not answer; the verdict lands in ``OUT``."""
    from hangscope.pipeline import analyze_evidence, prepare_out_dir
    from hangscope.sources.load import load_paths

    started = time.monotonic()
    out = prepare_out_dir(output)
    fan = FanoutOptions(job_id=fan.job_id, out_dir=os.path.join(out, "bundles"),
                        timeout=fan.timeout, collect_args=fan.collect_args, nodes=fan.nodes)
    result = run_slurm_collect(fan)
    evidence, report = load_paths(result.bundles, load)
    gaps = node_gaps(result, set(evidence.ranks), evidence.expected_world_size())
    evidence.gaps[:0] = gaps  # first: the reader should see the missing node before details
    analyzed = analyze_evidence(evidence, output, out)
    analyzed.load_report = report
    summary = analyzed.summary()
    summary.collect_tally = result.tally()
    summary.seconds = time.monotonic() - started
    return summary


def _nothing(result: FanoutResult) -> str:
    reasons = "; ".join(f"{n.node}: {n.detail}" for n in result.nodes[:4])
    more = f"; and {len(result.nodes) - 4} more" if len(result.nodes) > 4 else ""
    return f"SLURM job {result.job_id}: no node sent a bundle ({reasons}{more})"
