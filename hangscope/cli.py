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
from typing import Any, TypeVar, cast

import click

from hangscope import __version__
from hangscope.errors import ExitCode, HangscopeError
from hangscope.options import AttachOptions, LoadOptions, OutputOptions
from hangscope.pipeline import Summary, run_analyze, run_attach, run_report
from hangscope.ranges import format_ranks
from hangscope.report.text import format_verdict

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
                     help="Keep tokens and passwords found in logs in the report."),
        click.option("-v", "--verbose", count=True, help="Log progress to stderr (-vv: debug)."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


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
@output_options
def analyze(paths: tuple[str, ...], prefix: str | None, world_size: int | None,
            out_dir: str | None, force: bool, as_json: bool, no_redact: bool,
            verbose: int) -> int:
    """Analyze saved evidence: flight-recorder dumps (pickle or JSON), or hangscope bundles."""
    _configure_logging(verbose)
    result = run_analyze(list(paths), LoadOptions(prefix=prefix, world_size=world_size),
                         OutputOptions(out_dir=out_dir, force=force, redact=not no_redact))
    _print_result(result, as_json)
    return result.exit_code


@cli.command()
@click.option("--pid-group", type=int, help="Process group id of the job (its launcher's or "
                                            "its ranks'); descendants are followed.")
@click.option("--pid", "pids", type=int, multiple=True,
              help="A launcher (torchrun, ...) or rank pid; repeatable.")
@click.option("--match", help="Regular expression over command lines, to find ranks.")
@click.option("--samples", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Stack samples per rank, to tell stuck from slow.")
@click.option("--interval", type=click.FloatRange(0.05, 30), default=1.0, show_default=True,
              help="Seconds between samples.")
@click.option("--max-samples", type=click.IntRange(1, 60), default=8, show_default=True,
              help="While the first samples show ranks moving differently (one rank's stack "
                   "changes while another's sits, or one burns several times the CPU of "
                   "another), keep sampling up to this many, to tell a slow rank from stuck "
                   "and healthy ones: at most MAX_SAMPLES x INTERVAL seconds of sampling. A job "
                   "whose ranks all sit still, or all move alike, stops at --samples.")
@click.option("--dump-timeout", type=click.FloatRange(0.5, 120), default=5.0, show_default=True,
              help="Seconds allowed for one py-spy dump or flight-recorder trigger.")
@click.option("--native", is_flag=True, help="Include native (C/C++) frames in stacks.")
@click.option("--nonblocking", is_flag=True,
              help="Never pause a rank, even for a stack dump (stacks may be torn).")
@click.option("--no-fr-trigger", is_flag=True,
              help="Do not ask ranks to write flight-recorder dumps through their dump pipe.")
@click.option("--no-ras", is_flag=True,
              help="Do not query NCCL's RAS service (what ncclras shows) on this node.")
@output_options
def attach(pid_group: int | None, pids: tuple[int, ...], match: str | None, samples: int,
           interval: float, max_samples: int, dump_timeout: float, native: bool, nonblocking: bool,
           no_fr_trigger: bool, no_ras: bool, out_dir: str | None, force: bool, as_json: bool,
           no_redact: bool, verbose: int) -> int:
    """Attach to a live job, collect stacks, state, logs and FR dumps, and analyze them.

    Writes OUT/bundle/ first, so `hangscope analyze OUT/bundle` reproduces the verdict later.
    Nothing is killed or signalled.
    """
    _configure_logging(verbose)
    if pid_group is None and not pids and not match:
        raise click.UsageError("give --pid-group PGID, --pid PID or --match PATTERN")
    options = AttachOptions(pid_group=pid_group, pids=pids, match=match, samples=samples,
                            interval=interval, max_samples=max(samples, max_samples),
                            dump_timeout=dump_timeout, native=native,
                            nonblocking=nonblocking, trigger_fr=not no_fr_trigger,
                            query_ras=not no_ras)
    result = run_attach(options, LoadOptions(),
                        OutputOptions(out_dir=out_dir, force=force, redact=not no_redact))
    _print_result(result, as_json)
    return result.exit_code


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["html", "text", "json"]), default="html",
              show_default=True, help="What to render.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write to this file instead of stdout.")
@click.option("--no-redact", is_flag=True, help="Keep tokens and passwords found in logs.")
def report(paths: tuple[str, ...], fmt: str, output: str | None, no_redact: bool) -> int:
    """Re-render the report of a bundle (or any saved evidence) without collecting again."""
    from hangscope.report.render import Format, render

    result = run_report(list(paths), LoadOptions())
    color = (output is None and fmt == "text" and sys.stdout.isatty()
             and "NO_COLOR" not in os.environ)
    text = render(result, cast(Format, fmt), output, redact=not no_redact, color=color)
    if output is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"Wrote {output}", err=True)
    return result.exit_code


def _print_result(result: Summary, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result.verdict.to_json(), indent=2))
    else:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        for line in format_verdict(result.verdict, color=color):
            click.echo(line)
    click.echo(_tally(result), err=as_json)


def _tally(result: Summary) -> str:
    verdict = result.verdict
    where = f"Wrote {result.out_dir}" if result.out_dir else "Analyzed"
    parts = [f"{where} ({', '.join(os.path.basename(f) for f in result.files)})"
             if result.files else where]
    if result.collect_tally:
        parts.append(result.collect_tally)
    parts.append(f"{len(verdict.ranks_seen)} ranks with evidence"
                 + (f" of {verdict.world_size}" if verdict.world_size else ""))
    if verdict.ranks_missing:
        parts.append(f"none from {format_ranks(verdict.ranks_missing)}")
    if result.input_problems:
        parts.append(f"{len(result.input_problems)} input problems (see evidence gaps)")
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


