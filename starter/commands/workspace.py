"""`colonyctl workspace deploy|get|list|delete|suspend|resume`: application workspaces (a Jupyter
notebook, an LLM server, an SSH dev box) on Colony's clusters, one `WorkspaceWorkflow` each.

`deploy` validates everything before it starts anything: the class exists in the catalog, the
values and `--set`s parse as Helm parses them, every prompt is answered as the class says (asked
for on a terminal, secrets without echo; elsewhere a missing one is refused by name), and every
secret answer is sealed with Colony's public key on this machine (in remote mode, `colonyctl auth
login`, by the HTTP API, which gets it over the login's connection).

Every command talks through `starter.backend.workspaces()`: Temporal directly, or the HTTP API.

Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from starter.commands import Group
from starter.commands.purge import purge_command
from starter.options import (
    ListFormat,
    ListOutputOption,
    OrganizationFilterOption,
    OutputFormat,
    OutputOption,
    Submission,
    submits,
)

if TYPE_CHECKING:
    from clients.workspaces import Asker, WorkspaceRequest
    from models.workspace import WorkspaceSpec, WorkspaceStatus
    from models.workspace_class import Prompt, WorkspaceClassSpec

app = typer.Typer(
    help="Deploy, inspect, suspend, resume and delete workspaces.", no_args_is_help=True
)
GROUP = Group("workspace", rank=60, operations=True)

WorkspaceArgument = Annotated[str, typer.Argument(help="Workspace name.", show_default=False)]


def load_values_file(path: Path) -> dict[str, Any]:
    """A Helm values file (`-f`): a YAML mapping; `-` reads stdin."""
    from clients.errors import InvalidRequestError
    from clients.parsing import load_yaml

    data = load_yaml(path, "values")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidRequestError(f"values: {path} must hold a mapping of Helm values")
    return data


def build_workspace_spec(
    *,
    name: str,
    class_name: str,
    cluster: str,
    gpus: int | None,
    gpu_model: str | None,
    replicas: int | None,
    sets: list[str],
    string_sets: list[str],
    values_files: list[Path],
    suspended: bool,
) -> WorkspaceSpec:
    """The deploy request from the flags, validated strictly (nothing is started)."""
    from clients.errors import InvalidRequestError
    from clients.parsing import validated
    from models.deploy import resources_from_flags
    from models.values import SetError, user_values
    from models.workspace import WorkspaceSpec

    try:
        values = user_values([load_values_file(p) for p in values_files], sets, string_sets)
    except SetError as exc:
        raise InvalidRequestError(f"set: {exc}") from exc
    data: dict[str, Any] = {"name": name, "class": class_name, "cluster": cluster}
    if values:
        data["values"] = values
    resources = resources_from_flags(gpus, gpu_model, replicas)
    if resources is not None:
        data["resources"] = resources
    if suspended:
        data["suspend"] = True
    return validated(WorkspaceSpec, data)


def terminal_asker() -> Asker | None:
    """Asks for missing prompts when stdin and stderr are a terminal (secrets without echo);
    None elsewhere (a script or a pipe is refused, naming the prompt)."""
    import sys

    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    return ask_prompt


def ask_prompt(prompt: Prompt) -> Any:
    """One prompt's answer from the terminal, asked again until it is not empty."""
    import getpass
    import sys

    from models.workspace_class import PromptType

    label = prompt.display_name
    if prompt.description:
        label += f" ({prompt.description})"
    if prompt.options:
        label += f" [{'/'.join(prompt.options)}]"
    while True:
        if prompt.type is PromptType.SECRET:
            answer = getpass.getpass(f"{label}: ", stream=sys.stderr)
        else:
            sys.stderr.write(f"{label}: ")
            sys.stderr.flush()
            answer = sys.stdin.readline().rstrip("\n")
        if answer.strip():
            return answer


def follow(name: str, done: Any, *, timeout: float | None) -> WorkspaceStatus | None:
    """Follow a workspace until `done(status)`, printing each change of phase on stderr."""
    from starter import output
    from starter.backend import workspaces
    from starter.session import run
    from starter.workspace_output import progress_line

    spaces = workspaces()
    seen: list[str] = []

    def show(status: WorkspaceStatus) -> None:
        line = progress_line(status)
        if not seen or seen[-1] != line:
            seen.append(line)
            output.info(line)

    return run(lambda: spaces.wait(name, done, show, give_up_after=timeout))


def deploy_finished(status: WorkspaceStatus) -> bool:
    """The workspace's deploy operation has ended: it failed, or it reached its phase and its
    access is worked out (Running comes first, the routes a moment after, in the same operation)."""
    if status.phase.value == "Failed":
        return True
    running = [status.current_operation, *status.queued_operations]
    return not any(op is not None and op.kind.value == "deploy" for op in running)


def _finished(status: WorkspaceStatus | None, name: str, wanted: str, fmt: OutputFormat) -> None:
    """Report a followed workspace; `OperationFailedError` unless it reached `wanted`."""
    from clients.errors import OperationFailedError
    from starter import output
    from starter.workspace_output import access_lines

    if status is None:
        raise OperationFailedError(f"workspace '{name}': its workflow ended without a status")
    if status.phase.value != wanted:
        failure = status.failure_context
        reason = failure.message if failure is not None and failure.message else status.message
        raise OperationFailedError(
            f"workspace '{name}' is {status.phase.value}: {reason or 'see colonyctl workspace get'}"
        )
    if output.emit(status, fmt):
        return
    output.write(f"workspace {name} {wanted.lower()}")
    for line in access_lines(status):
        output.write(f"  {line}")


@app.command("deploy")
@submits
def deploy(
    name: WorkspaceArgument,
    class_name: Annotated[
        str,
        typer.Option(
            "--class", help="The exact, versioned class (colonyctl class list).", show_default=False
        ),
    ],
    cluster: Annotated[
        str, typer.Option("--cluster", help="The Colony cluster to run it on.", show_default=False)
    ],
    gpus: Annotated[
        int | None, typer.Option("--gpus", help="GPUs per replica (overrides the class).")
    ] = None,
    gpu_model: Annotated[
        str | None,
        typer.Option(
            "--gpu-model", help="GPU model, e.g. h100-80gb (node label exalsius.ai/gpu-model)."
        ),
    ] = None,
    replicas: Annotated[int | None, typer.Option("--replicas", help="Replicas.")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Repeatable Helm value, path=value (as helm --set)."),
    ] = None,
    set_string: Annotated[
        list[str] | None,
        typer.Option("--set-string", help="Repeatable Helm value, always a string."),
    ] = None,
    values: Annotated[
        list[Path] | None,
        typer.Option(
            "--values",
            "-f",
            help="Repeatable Helm values YAML file ('-' for stdin); at most 1 MiB, values nest "
            "at most 32 levels, 128 KiB in all (docs/api.md#bounds).",
        ),
    ] = None,
    suspended: Annotated[
        bool, typer.Option("--suspended", help="Keep its definition; install nothing yet.")
    ] = False,
    *,
    submission: Submission,
) -> None:
    """Deploy a workspace of a class on a cluster; with --wait, follow it until it runs."""
    spec = build_workspace_spec(
        name=name,
        class_name=class_name,
        cluster=cluster,
        gpus=gpus,
        gpu_model=gpu_model,
        replicas=replicas,
        sets=set_ or [],
        string_sets=set_string or [],
        values_files=values or [],
        suspended=suspended,
    )
    deploy_workspace(spec, submission)


def deploy_workspace(
    spec: WorkspaceSpec,
    submission: Submission,
    workspace_class: WorkspaceClassSpec | None = None,
) -> None:
    """Check the request against its class, seal its secrets, start its workflow, report."""
    from clients.workspaces import Deployment, StartedWorkspace
    from starter import output
    from starter.backend import workspaces
    from starter.session import print_link, run

    spaces = workspaces()
    deployment = Deployment(
        spec, workspace_class, ask=terminal_asker(), request_id=submission.request_id
    )

    async def go() -> StartedWorkspace:
        started = await spaces.deploy(deployment)
        print_link(spaces.workflow(spec.name))
        return started

    started = run(go)
    if submission.wait:
        wanted = "Suspended" if spec.suspend else "Running"
        status = follow(spec.name, deploy_finished, timeout=submission.timeout)
        _finished(status, spec.name, wanted, submission.fmt)
        return
    data = {
        "workspace": spec.name,
        "class": spec.class_name,
        "cluster": spec.cluster,
        "workflowId": started.workflow_id,
        "webUi": spaces.workflow(spec.name).link,
    }
    output.started(
        data,
        submission.fmt,
        f"workspace {spec.name} deploying: class {spec.class_name} on cluster {spec.cluster}",
        repeated=started.repeated,
    )


@app.command("get")
def get(name: WorkspaceArgument, fmt: OutputOption = OutputFormat.TABLE) -> None:
    """Show a workspace: phase, access, admission, conditions, failure. Exit 3 when it does not
    exist."""
    from starter.backend import workspaces
    from starter.session import show
    from starter.workspace_output import print_workspace

    spaces = workspaces()
    show(lambda: spaces.get(name), fmt, print_workspace)


@app.command("list")
def list_(
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="Only the workspaces of this cluster.")
    ] = None,
    organization: OrganizationFilterOption = None,
    fmt: ListOutputOption = ListFormat.TABLE,
) -> None:
    """List workspaces, with their organization (from Temporal visibility: ColonyKind =
    'workspace'), in natural order (burst-2 before burst-10); -o wide adds their GPUs, place in
    line and age."""
    from starter import output
    from starter.backend import workspaces
    from starter.session import show_list
    from starter.workspace_output import workspace_rows

    spaces = workspaces()
    fields = ("name", "organization", "cluster", "class_name", "phase", "position", "gpus")
    show_list(
        lambda: spaces.list_all(cluster=cluster, organization=organization),
        fmt.output,
        lambda found: output.print_table(*workspace_rows(found, wide=fmt is ListFormat.WIDE)),
        (*fields, "workflow_id", "started"),
        keys={"class_name": "class"},
    )


def _operate(name: str, request: WorkspaceRequest, wanted: str, submission: Submission) -> None:
    """Send a workspace an operation; with --wait, follow it until it has finished."""
    from models.workspace_operations import WorkspaceOperationAccepted
    from starter import output
    from starter.backend import workspaces
    from starter.session import print_link, run
    from starter.submit import purged_line

    spaces = workspaces()

    async def go() -> WorkspaceOperationAccepted:
        accepted = await spaces.send(name, request, request_id=submission.request_id)
        print_link(spaces.workflow(name))
        return accepted

    accepted = run(go)
    if submission.wait:
        # Done when this operation has finished: the phase then says how it went (a resume that
        # waits for GPUs is still running while the workspace is Waiting).
        status = follow(
            name,
            lambda s: (op := s.operation(accepted.operation_id)) is not None and op.state.finished,
            timeout=submission.timeout,
        )
        _finished(status, name, wanted, submission.fmt)
        return
    workflow = spaces.workflow(name)
    data = {
        "workspace": name,
        "operationId": accepted.operation_id,
        "kind": accepted.kind.value,
        "position": accepted.position,
        "workflowId": workflow.workflow_id,
        "webUi": workflow.link,
    }
    if accepted.purge_workflow_id:
        data["purgeWorkflowId"] = accepted.purge_workflow_id
    if not output.emit(data, submission.fmt):
        output.write(
            purged_line(f"workspace {name}", accepted.purge_workflow_id)
            or f"{accepted.kind.value} of workspace {name} accepted as {accepted.operation_id} "
            f"(queue position {accepted.position})"
        )


OPERATIONS = {
    "delete": (
        "Deleted",
        "Delete a workspace: routes, release, namespace, then its GPUs go to the next in line.",
    ),
    "suspend": (
        "Suspended",
        "Uninstall the release, keep the namespace, volumes and definition; free the GPUs.",
    ),
    "resume": (
        "Running",
        "Deploy a suspended (or failed) workspace again, through GPU admission again.",
    ),
}
"""The operations a user sends a workspace, one command each: the phase `--wait` expects once
it has finished, and the command's help."""


def _operation_command(verb: str, wanted: str, summary: str) -> None:
    """The command that sends a workspace the operation `verb` (the request of that kind)."""

    def command(name: WorkspaceArgument, *, submission: Submission) -> None:
        from models.workspace_operations import (
            DeleteWorkspaceRequest,
            ResumeWorkspaceRequest,
            SuspendWorkspaceRequest,
        )

        requests: dict[str, WorkspaceRequest] = {
            "delete": DeleteWorkspaceRequest(reason="colonyctl workspace delete"),
            "suspend": SuspendWorkspaceRequest(),
            "resume": ResumeWorkspaceRequest(),
        }
        _operate(name, requests[verb], wanted, submission)

    command.__name__ = verb
    command.__doc__ = summary
    app.command(verb)(submits(command))


for _verb, (_wanted, _summary) in OPERATIONS.items():
    _operation_command(_verb, _wanted, _summary)


app.command("purge")(purge_command("workspace"))
