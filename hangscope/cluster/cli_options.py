"""The SLURM, ssh and Kubernetes options of ``attach`` and ``collect``, and the fan-out options
they build; kept here so that ``cli.py`` only gains one decorator line per command."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from hangscope.cluster.remote import RemoteOptions, RemoteTarget
from hangscope.cluster.slurm import FanoutOptions

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_TIMEOUT = 60.0


def slurm_options() -> Callable[[F], F]:
    """``--slurm-job`` (fan out over the job's nodes), ``--slurm-job-local`` and ``--slurm-node``
    (this node's processes of a job). The fan-out is bounded by the command's ``--timeout``
    (default 60 s)."""
    decorators = [
        click.option("--slurm-job", metavar="JOBID",
                     help="Collect on every node of this running SLURM job (one srun step per "
                          "node, bundles through --out, which must be on a shared filesystem), "
                          "then analyze them together. See docs/cluster.md."),
        click.option("--slurm-job-local", metavar="JOBID",
                     help="This node's processes of SLURM job JOBID: those with SLURM_JOB_ID="
                          "JOBID in their environment, and their descendants."),
        click.option("--slurm-node", metavar="NAME",
                     help="Only processes whose SLURMD_NODENAME is NAME (virtual nodes that "
                          "share one machine)."),
    ]

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def remote_options() -> Callable[[F], F]:
    """``--ssh HOST`` (repeatable), ``--k8s-pods``/``--k8s-selector`` with ``--namespace`` and
    ``--container``, and ``--remote-python``: the command receives them as one ``remote``
    argument, a RemoteTarget, or None when none of them was given."""
    decorators = [
        click.option("--ssh", "ssh_hosts", metavar="HOST", multiple=True,
                     help="Collect on this host over ssh (repeatable; user@host works; options "
                          "from ~/.ssh/config), the bundle streamed back, then analyze them "
                          "together. The job selector applies on every host. See "
                          "docs/cluster.md."),
        click.option("--k8s-pods", metavar="POD[,POD...]",
                     help="Collect in these pods with kubectl exec, bundles streamed back."),
        click.option("--k8s-selector", metavar="LABELS",
                     help="Collect in the running pods that match this label selector "
                          "(kubectl get pods -l LABELS)."),
        click.option("--namespace", metavar="NS", help="Kubernetes namespace of the pods."),
        click.option("--container", metavar="NAME",
                     help="Container of each pod to run in (kubectl exec -c)."),
        click.option("--remote-python", metavar="PYTHON", default="python3", show_default=True,
                     help="Python with hangscope and py-spy on each host or pod."),
    ]

    def apply(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs["remote"] = remote_target(
                kwargs.pop("ssh_hosts"), kwargs.pop("k8s_pods"), kwargs.pop("k8s_selector"),
                kwargs.pop("namespace"), kwargs.pop("container"), kwargs.pop("remote_python"))
            return func(*args, **kwargs)

        command: Any = wrapper
        for decorator in reversed(decorators):
            command = decorator(command)
        return command  # type: ignore[no-any-return]

    return apply


def remote_target(ssh_hosts: tuple[str, ...], k8s_pods: str | None, k8s_selector: str | None,
                  namespace: str | None, container: str | None,
                  python: str) -> RemoteTarget | None:
    """The one place to fan out to, or None; a usage error for options that do not fit."""
    given = [name for name, value in (("--ssh", ssh_hosts), ("--k8s-pods", k8s_pods),
                                      ("--k8s-selector", k8s_selector)) if value]
    if len(given) > 1:
        raise click.UsageError(f"give one of {' and '.join(given)}, not both")
    if not given:
        for name, value in (("--namespace", namespace), ("--container", container)):
            if value:
                raise click.UsageError(f"{name} needs --k8s-pods or --k8s-selector")
        return None
    if not python.strip():
        raise click.UsageError("--remote-python is empty")
    if ssh_hosts:
        bad = [h for h in ssh_hosts if not h.strip() or h.startswith("-")]
        if bad:
            raise click.UsageError(f"--ssh {bad[0]!r} is not a host name")
        return RemoteTarget("ssh", tuple(ssh_hosts), python=python)
    pods = tuple(p.strip() for p in (k8s_pods or "").split(",") if p.strip())
    if k8s_pods is not None and (not pods or any(p.startswith("-") for p in pods)):
        raise click.UsageError(f"--k8s-pods {k8s_pods!r} is not a list of pod names")
    return RemoteTarget("kubectl", pods, selector=k8s_selector, namespace=namespace,
                        container=container, python=python)


def collect_args(*, samples: int | None = None, interval: float | None = None,
                 max_samples: int | None = None, native: bool = False,
                 nonblocking: bool = False, no_fr_trigger: bool = False,
                 no_ras: bool = False, no_redact: bool = False) -> tuple[str, ...]:
    """The options given here that differ from attach's defaults, for each node's ``hangscope
    collect`` (the remote command line stays short and plain)."""
    args: list[str] = []
    for name, value, default in (("--samples", samples, 3), ("--interval", interval, 1.0),
                                 ("--max-samples", max_samples, 8)):
        if value is not None and value != default:
            args += [name, f"{value:g}" if isinstance(value, float) else str(value)]
    for name, flag in (("--native", native), ("--nonblocking", nonblocking),
                       ("--no-fr-trigger", no_fr_trigger), ("--no-ras", no_ras),
                       ("--no-redact", no_redact)):
        if flag:
            args.append(name)
    return tuple(args)


def fanout_options(job_id: str, out_dir: str, timeout: float | None, *, samples: int | None = None,
                   interval: float | None = None, max_samples: int | None = None,
                   native: bool = False, nonblocking: bool = False, no_fr_trigger: bool = False,
                   no_ras: bool = False, no_redact: bool = False) -> FanoutOptions:
    """The SLURM fan-out, passing on the collection options given here."""
    args = collect_args(samples=samples, interval=interval, max_samples=max_samples,
                        native=native, nonblocking=nonblocking, no_fr_trigger=no_fr_trigger,
                        no_ras=no_ras, no_redact=no_redact)
    return FanoutOptions(job_id=job_id, out_dir=out_dir,
                         timeout=timeout if timeout is not None else DEFAULT_TIMEOUT,
                         collect_args=args)


def remote_fanout_options(target: RemoteTarget, out_dir: str, timeout: float | None, *,
                          pid_group: int | None, pids: tuple[int, ...], match: str | None,
                          **collection: Any) -> RemoteOptions:
    """The ssh or kubectl fan-out: the job selector, as it applies on every host, and the
    collection options given here (``collection``: those of ``collect_args``)."""
    if pid_group is None and not pids and not match:
        raise click.UsageError("give the job selector each host applies: --pid-group PGID, "
                               "--pid PID or --match PATTERN")
    selector: list[str] = []
    if pid_group is not None:
        selector += ["--pid-group", str(pid_group)]
    for pid in pids:
        selector += ["--pid", str(pid)]
    if match:
        selector += ["--match", match]
    return RemoteOptions(target=target, out_dir=out_dir,
                         timeout=timeout if timeout is not None else DEFAULT_TIMEOUT,
                         collect_args=(*selector, *collect_args(**collection)))
