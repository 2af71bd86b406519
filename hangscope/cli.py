"""Command line: parse options, call the pipeline, print. No analysis logic lives here.

Exit codes (documented in README.md): 0 no hang found, 1 inconclusive, 2 bad input or usage,
3 hang or crash found, 4 could not collect, 70 internal error.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from hangscope import __version__
from hangscope.cluster.cli_options import remote_options, slurm_options
from hangscope.errors import ExitCode, HangscopeError
from hangscope.options import AttachOptions, LoadOptions, OutputOptions
from hangscope.pipeline import Summary, run_analyze, run_attach, run_collect, run_report
from hangscope.progress import TerminalProgress
from hangscope.ranges import format_ranks
from hangscope.report.text import format_verdict

if TYPE_CHECKING:
    from hangscope.cluster.remote import RemoteTarget
    from hangscope.collect.attach import CollectSummary

F = TypeVar("F", bound=Callable[..., Any])


def output_options(func: F) -> F:
    """Options shared by every command that writes a verdict."""
    decorators = [
        click.option("--out", "out_dir", type=click.Path(file_okay=False),
                     help="Directory for verdict.json and report.html "
                          "[default: ./hangscope-YYYYmmdd-HHMMSS]."),
        click.option("--force", is_flag=True, help="Write into a non-empty --out directory."),
        click.option("--json", "as_json", is_flag=True,
                     help="Print verdict.json to stdout instead of the summary."),
        click.option("--no-redact", is_flag=True,
                     help="Keep tokens and passwords found in logs: by default they are "
                          "masked in the report, verdict.json, the terminal and the bundle."),
        click.option("-v", "--verbose", count=True, help="Log progress to stderr (-vv: debug)."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def job_options(func: F) -> F:
    """Which processes are the job: options of every command that touches a live job."""
    decorators = [
        click.option("--pid-group", type=int, help="Process group id of the job (its launcher's "
                                                  "or its ranks'); descendants are followed."),
        click.option("--pid", "pids", type=int, multiple=True,
                     help="A launcher (torchrun, ...) or rank pid; repeatable."),
        click.option("--match", help="Regular expression over command lines, to find ranks."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def collection_options(func: F) -> F:
    """How hard to look at a live job: shared by attach and collect."""
    decorators = [
        click.option("--samples", type=click.IntRange(1, 20), default=3, show_default=True,
                     help="Stack samples per rank, to tell stuck from slow."),
        click.option("--interval", type=click.FloatRange(0.05, 30), default=1.0,
                     show_default=True, help="Seconds between samples."),
        click.option("--max-samples", type=click.IntRange(1, 60), default=8, show_default=True,
                     help="While the first samples show ranks moving differently (one rank's "
                          "stack changes while another's sits, or one burns several times the "
                          "CPU of another), keep sampling up to this many, to tell a slow rank "
                          "from stuck and healthy ones: at most MAX_SAMPLES x INTERVAL seconds "
                          "of sampling. A job whose ranks all sit still, or all move alike, "
                          "stops at --samples (once the samples span 1.5 s)."),
        click.option("--dump-timeout", type=click.FloatRange(0.5, 120), default=5.0,
                     show_default=True,
                     help="Seconds allowed for one py-spy dump or flight-recorder trigger."),
        click.option("--native", is_flag=True, help="Include native (C/C++) frames in stacks."),
        click.option("--nonblocking", is_flag=True,
                     help="Never pause a rank, even for a stack dump (stacks may be torn)."),
        click.option("--no-fr-trigger", is_flag=True,
                     help="Do not ask ranks to write flight-recorder dumps through their dump "
                          "pipe."),
        click.option("--no-ras", is_flag=True,
                     help="Do not query NCCL's RAS service (what ncclras shows) on this node."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def timeout_option(func: F) -> F:
    """``--timeout``: bound a command that touches a live job."""
    return click.option(
        "--timeout", type=click.FloatRange(0.5, 86400),
        help="Seconds the whole command may take. On expiry the collection stops, what was "
             "collected is written (and analyzed, by attach) and the output says what was "
             "cut short. attach keeps a quarter of it (1-15 s) for the analysis.")(func)


def quiet_option(func: F) -> F:
    """``--quiet``: for scripts; only errors are printed, the exit code says the rest."""
    return click.option("-q", "--quiet", is_flag=True,
                        help="Print nothing but errors; the exit code says the outcome.")(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hangscope")
def cli() -> None:
    """Find the rank that holds a distributed PyTorch job up, and why."""


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--prefix", help="Flight-recorder file name prefix, e.g. nccl_trace_rank_, when "
                               "file names do not say the rank unambiguously.")
@click.option("--world-size", type=click.IntRange(min=1),
              help="Number of ranks in the job, when the evidence may not show all of them.")
@click.option("-j", "--jobs", type=click.IntRange(min=1),
              help="Processes that read flight-recorder dumps and logs (default: one per "
                   "usable core).")
@click.option("--profile", is_flag=True,
              help="After the verdict, print to stderr the wall and CPU seconds this run spent "
                   "reading, scanning logs, unpickling, reducing, matching, in the detectors and "
                   "rendering.")
@quiet_option
@output_options
def analyze(paths: tuple[str, ...], prefix: str | None, world_size: int | None, quiet: bool,
            out_dir: str | None, force: bool, as_json: bool, no_redact: bool,
            verbose: int, jobs: int | None = None, profile: bool = False) -> int:
    """Analyze saved evidence: flight-recorder dumps (pickle or JSON), py-spy dumps (JSON or
    text), gdb/faulthandler stack pastes, rank, launcher, NCCL and kernel logs (as pasted: wrapped,
    prefixed), nvidia-smi output, runtime records, or hangscope bundles; any mix, files or
    folders, recognised by content. Writes verdict.json and report.html under --out.

    Several bundles (one per node, from `hangscope collect`), or a folder holding them, are
    merged by global rank: a rank in two bundles is an error; ranks in none are reported
    missing, with the node that should have held them where the manifests say."""
    _configure_logging(verbose)
    result = run_analyze(list(paths), LoadOptions(prefix=prefix, world_size=world_size, jobs=jobs),
                         OutputOptions(out_dir=out_dir, force=force, redact=not no_redact,
                                       profile=profile))
    _print_result(result, as_json, quiet)
    if result.profile is not None:
        from hangscope.timing import format_profile

        for line in format_profile(result.profile):
            click.echo(line, err=True)
    return result.exit_code


@cli.command()
@job_options
@collection_options
@slurm_options()
@remote_options()
@timeout_option
@quiet_option
@output_options
@click.option("--no-probe", is_flag=True,
              help="Do not ask the ranks' in-job probes (HANGSCOPE_PROBE=1), even where they run.")
def attach(pid_group: int | None, pids: tuple[int, ...], match: str | None, samples: int,
           interval: float, max_samples: int, dump_timeout: float, native: bool, nonblocking: bool,
           no_fr_trigger: bool, no_ras: bool, out_dir: str | None, force: bool, as_json: bool,
           no_redact: bool, verbose: int, quiet: bool = False, slurm_job: str | None = None,
           slurm_job_local: str | None = None, slurm_node: str | None = None,
           timeout: float | None = None, remote: RemoteTarget | None = None,
           no_probe: bool = False) -> int:
    """Attach to a live job, collect stacks, state, logs and FR dumps, and analyze them.

    Writes OUT/bundle/ first, so `hangscope analyze OUT/bundle` reproduces the verdict later.
    Nothing is killed or signalled.
    """
    _configure_logging(verbose)
    output = OutputOptions(out_dir=out_dir, force=force, redact=not no_redact)
    if remote is not None:
        from hangscope.cluster.cli_options import remote_fanout_options
        from hangscope.cluster.run import run_remote_attach

        if slurm_job is not None:
            raise click.UsageError("give --slurm-job or --ssh/--k8s-*, not both")
        remote_fan = remote_fanout_options(
            remote, out_dir or "", timeout, pid_group=pid_group, pids=pids, match=match,
            samples=samples, interval=interval, max_samples=max_samples, native=native,
            nonblocking=nonblocking, no_fr_trigger=no_fr_trigger, no_ras=no_ras,
            no_redact=no_redact)
        result = run_remote_attach(remote_fan, LoadOptions(), output)
        _print_result(result, as_json, quiet)
        return result.exit_code
    if slurm_job is not None:
        from hangscope.cluster.cli_options import fanout_options
        from hangscope.cluster.run import run_slurm_attach

        fan = fanout_options(slurm_job, out_dir or "", timeout, samples=samples,
                             interval=interval, max_samples=max_samples, native=native,
                             nonblocking=nonblocking, no_fr_trigger=no_fr_trigger, no_ras=no_ras,
                             no_redact=no_redact)
        result = run_slurm_attach(fan, LoadOptions(), output)
        _print_result(result, as_json, quiet)
        return result.exit_code
    options = _attach_options(pid_group, pids, match, samples, interval, max_samples,
                              dump_timeout, native, nonblocking, no_fr_trigger, no_ras,
                              slurm_job_local, slurm_node, timeout, probe=not no_probe,
                              redact=not no_redact)
    result = run_attach(options, LoadOptions(), output, progress=_progress(quiet, timeout))
    _print_result(result, as_json, quiet)
    return result.exit_code


@cli.command()
@job_options
@collection_options
@slurm_options()
@remote_options()
@timeout_option
@quiet_option
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Bundle directory to write (as attach writes OUT/bundle); with --slurm-job, "
                   "a folder on a shared filesystem that gets one bundle per node; with --ssh "
                   "or --k8s-*, a local folder that gets one bundle per host or pod.")
@click.option("--force", is_flag=True, help="Replace an earlier bundle in --out.")
@click.option("--no-redact", is_flag=True,
              help="Keep tokens and passwords in the bundle's copies of logs (masked by default).")
@click.option("-v", "--verbose", count=True, help="Log progress to stderr (-vv: debug).")
def collect(pid_group: int | None, pids: tuple[int, ...], match: str | None, samples: int,
            interval: float, max_samples: int, dump_timeout: float, native: bool,
            nonblocking: bool, no_fr_trigger: bool, no_ras: bool, slurm_job: str | None,
            slurm_job_local: str | None, slurm_node: str | None, timeout: float | None,
            quiet: bool, out_dir: str, force: bool, verbose: int, no_redact: bool = False,
            remote: RemoteTarget | None = None) -> int:
    """Collect on this node into a bundle, analyzing nothing (one per node; then
    `hangscope analyze BUNDLE...` merges them by global rank). With --slurm-job, one bundle per
    node of the job under --out; with --ssh or --k8s-*, one per host or pod. Exit 0 when
    something was collected, 4 when nothing could be."""
    _configure_logging(verbose)
    if slurm_job is not None or remote is not None:
        from hangscope.cluster.cli_options import fanout_options, remote_fanout_options
        from hangscope.cluster.run import run_remote_collect, run_slurm_collect

        collection: dict[str, Any] = {
            "samples": samples, "interval": interval, "max_samples": max_samples,
            "native": native, "nonblocking": nonblocking, "no_fr_trigger": no_fr_trigger,
            "no_ras": no_ras, "no_redact": no_redact}
        if remote is None:
            fanned = run_slurm_collect(fanout_options(slurm_job or "", out_dir, timeout,
                                                      **collection))
        elif slurm_job is not None:
            raise click.UsageError("give --slurm-job or --ssh/--k8s-*, not both")
        else:
            fanned = run_remote_collect(remote_fanout_options(
                remote, out_dir, timeout, pid_group=pid_group, pids=pids, match=match,
                **collection))
        if not quiet:
            click.echo(fanned.tally())
            for node in fanned.missing:
                click.echo(f"  {node.node}: {node.detail}")
        return int(ExitCode.NO_HANG)
    options = _attach_options(pid_group, pids, match, samples, interval, max_samples,
                              dump_timeout, native, nonblocking, no_fr_trigger, no_ras,
                              slurm_job_local, slurm_node, timeout, redact=not no_redact)
    collected = run_collect(options, out_dir, force=force, progress=_progress(quiet, timeout))
    if not quiet:
        click.echo(_collect_line(collected))
    return int(ExitCode.NO_HANG)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["html", "text", "json"]), default=None,
              help="What to render [default: text to a terminal, else html].")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write to this file instead of stdout.")
@click.option("--no-redact", is_flag=True, help="Keep tokens and passwords found in logs.")
def report(paths: tuple[str, ...], fmt: str | None, output: str | None, no_redact: bool) -> int:
    """Re-render the report of a bundle (or any saved evidence) without collecting again."""
    from hangscope.report.render import Format, render

    if fmt is None:  # a page of HTML is no use on a terminal
        fmt = "text" if output is None and sys.stdout.isatty() else "html"
    result = run_report(list(paths), LoadOptions(), redact=not no_redact)
    color = (output is None and fmt == "text" and sys.stdout.isatty()
             and "NO_COLOR" not in os.environ)
    text = render(result, cast(Format, fmt), output, redact=not no_redact, color=color)
    if output is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"Wrote {output}", err=True)
    return result.exit_code


@cli.command()
def schema() -> int:
    """Print the JSON Schema of verdict.json (what analyze, attach and watch write)."""
    from hangscope.schema import schema_text

    click.echo(schema_text(), nl=False)
    return int(ExitCode.NO_HANG)


@cli.command()
@click.option("--pid-group", type=int,
              help="Process group id of the job; descendants are followed.")
@click.option("--pid", "pids", type=int, multiple=True, help="A launcher or rank pid; repeatable.")
@click.option("--match", help="Regular expression over command lines, to find ranks.")
@click.option("--slurm-job", metavar="JOBID",
              help="Watch this node's ranks of SLURM job JOBID (run it on one of the job's "
                   "nodes); on a stall, collect on every node of the job as attach --slurm-job "
                   "does, into OUT/bundles.")
@click.option("--stall", type=click.FloatRange(1, 86400), default=60.0, show_default=True,
              help="Seconds without progress (no stack change, no progress line, no CPU) "
                   "after which the job is collected and analyzed.")
@click.option("--timeout", type=click.FloatRange(1, 7 * 86400), default=3600.0,
              show_default=True, help="Stop watching after this many seconds (exit 0).")
@click.option("--interval", type=click.FloatRange(0.1, 60),
              help="Seconds between checks [default: stall/5, within 0.5-5].")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing unless a verdict is written.")
@output_options
def watch(pid_group: int | None, pids: tuple[int, ...], match: str | None,
          slurm_job: str | None, stall: float,
          timeout: float, interval: float | None, quiet: bool, out_dir: str | None, force: bool,
          as_json: bool, no_redact: bool, verbose: int) -> int:
    """Watch a live job cheaply; on a stall or a watchdog timeout line, attach once, write the
    report and exit with the verdict's code (3 hang, 0 none, 1 inconclusive, 4 could not
    collect). Exit 0 at --timeout; 143/130 on SIGTERM/SIGINT. See docs/watch.md."""
    from hangscope.watch import Stopped, WatchOptions, run_watch

    _configure_logging(verbose)
    if pid_group is None and not pids and not match and slurm_job is None:
        raise click.UsageError("give --pid-group PGID, --pid PID, --match PATTERN or "
                               "--slurm-job JOBID")
    options = WatchOptions(pid_group=pid_group, pids=pids, match=match, slurm_job=slurm_job,
                           stall=stall, timeout=timeout, interval=interval)
    try:
        result = run_watch(options, OutputOptions(out_dir=out_dir, force=force,
                                                  redact=not no_redact))
    except Stopped as exc:
        click.echo(f"hangscope: watch stopped by {exc}", err=True)
        return exc.exit_code
    for note in result.notes:
        click.echo(f"hangscope: {note}", err=True)
    if result.summary is None:
        if not quiet:
            click.echo(f"hangscope: {result.reason}")
        return result.exit_code
    click.echo(f"hangscope: {result.reason}", err=True)
    _print_result(result.summary, as_json)
    return result.exit_code


def _attach_options(pid_group: int | None, pids: tuple[int, ...], match: str | None,
                    samples: int, interval: float, max_samples: int, dump_timeout: float,
                    native: bool, nonblocking: bool, no_fr_trigger: bool, no_ras: bool,
                    slurm_job_local: str | None, slurm_node: str | None,
                    timeout: float | None, probe: bool = True,
                    redact: bool = True) -> AttachOptions:
    """What attach and collect collect on this node, from their shared options."""
    if pid_group is None and not pids and not match and slurm_job_local is None:
        raise click.UsageError("give --pid-group PGID, --pid PID, --match PATTERN, "
                               "--slurm-job JOBID or --slurm-job-local JOBID")
    return AttachOptions(pid_group=pid_group, pids=pids, match=match, samples=samples,
                         interval=interval, max_samples=max(samples, max_samples),
                         dump_timeout=dump_timeout, native=native, nonblocking=nonblocking,
                         trigger_fr=not no_fr_trigger, query_ras=not no_ras,
                         slurm_job=slurm_job_local, slurm_node=slurm_node, timeout=timeout,
                         probe=probe, redact=redact)


def _print_result(result: Summary, as_json: bool, quiet: bool = False) -> None:
    """The verdict (or verdict.json with --json) and the tally line; with --quiet only what
    --json asked for."""
    if as_json:
        click.echo(json.dumps(result.verdict.to_json(), indent=2))
    elif not quiet:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        for line in format_verdict(result.verdict, color=color):
            click.echo(line)
    if not quiet:
        click.echo(_tally(result), err=as_json)


def _collect_line(collected: CollectSummary) -> str:
    """collect's one line: where the bundle went, from which node and job, what it holds."""
    where = ", ".join(part for part in (
        f"node {collected.node}" if collected.node else "",
        f"job {collected.job_id}" if collected.job_id else "") if part)
    return (f"Wrote {collected.bundle_dir}" + (f" ({where})" if where else "")
            + f": {collected.tally()} | {collected.files} files | {collected.seconds:.2f}s")


def _progress(quiet: bool, timeout: float | None) -> TerminalProgress | None:
    """A progress line on stderr, only where a person watches it."""
    if quiet or not sys.stderr.isatty():
        return None
    return TerminalProgress(sys.stderr, limit_s=timeout)


def _tally(result: Summary) -> str:
    verdict = result.verdict
    where = f"Wrote {result.out_dir}" if result.out_dir else "Analyzed"
    parts = [f"{where} ({', '.join(os.path.basename(f) for f in result.files)})"
             if result.files else where]
    if result.collect_tally:
        parts.append(result.collect_tally)
    seen = len(verdict.ranks_seen)
    parts.append(f"{seen} rank{'' if seen == 1 else 's'} with evidence"
                 + (f" of {verdict.world_size}" if verdict.world_size else ""))
    if verdict.ranks_missing:
        parts.append(f"none from {format_ranks(verdict.ranks_missing)}")
    if result.input_problems:
        count = len(result.input_problems)
        parts.append(f"{count} input problem{'' if count == 1 else 's'} (see evidence gaps)")
    parts.append(f"{result.seconds:.2f}s")
    return " | ".join(parts)


def _configure_logging(verbose: int) -> None:
    if verbose:
        logging.basicConfig(level=logging.DEBUG if verbose > 1 else logging.INFO,
                            format="hangscope: %(message)s", stream=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point for the console script and for tests: returns the exit code."""
    try:
        code = cli.main(args=argv, prog_name="hangscope", standalone_mode=False)
    except HangscopeError as exc:
        click.echo(f"hangscope: error: {exc}", err=True)
        if exc.help_text:
            click.echo(exc.help_text, err=True)
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("hangscope: aborted", err=True)
        return int(ExitCode.BAD_INPUT)
    except click.ClickException as exc:
        exc.show()
        return int(ExitCode.BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("hangscope: interrupted", err=True)
        return 130
    except Exception:  # noqa: BLE001 - a bug: say so, with the traceback, and a distinct code
        click.echo("hangscope: internal error (please report this with the traceback):", err=True)
        traceback.print_exc()
        return int(ExitCode.INTERNAL_ERROR)
    return int(code) if isinstance(code, int) else 0


