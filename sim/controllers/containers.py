"""SIMULATOR. What a container's process does, reduced to what Kubernetes can see: its output
lines, how long it runs and its exit code. Pure (no IO, no clock): the kubelet plays the result.

`interpret(ContainerContext)` reads the container's argv (`command` + `args`, or `args` alone for
images whose entrypoint execs its arguments, as the CUDA images' does) and returns a `Program`:

- `echo [-n] words`, `printf fmt args` (`%s`, `\\n`), `true`, `false`, `exit N`,
  `sleep N` (seconds, or N with s/m/h/d; `sleep infinity` never ends), `tail -f ...` (never ends);
- `sh -c "script"` / `bash -c` with `;`, `&&`, `||` and newlines between commands, `$VAR` and
  `${VAR}` from the container's `env` values (not inside single quotes), `$HOSTNAME`;
- `nvidia-smi -L` (one line per GPU the device plugin gave this container, numbered from 0 as in
  the container, with the GPU's UUID), `nvidia-smi` (the status table) and
  `nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version,count --format=csv[,noheader][,nounits]`.

A container that was given no GPU does not have `nvidia-smi` at all: with the GPU operator's
defaults (device list as volume mounts, `NVIDIA_VISIBLE_DEVICES` from unprivileged containers
ignored) the NVIDIA runtime injects nothing and behaves like runc, so the exec fails before the
process starts (`StartError`, exit code 128; inside `sh -c`: `sh: 1: nvidia-smi: not found`, 127).

Anything else (an image's default process, a server, `python train.py`) is something the sim
cannot know the end of: it runs until the pod is deleted (`Step("serve")`). A few images the
sim's charts use print the startup line their real server prints.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from sim.controllers.gpus import CUDA_VERSION, DRIVER_VERSION, PRODUCTS

# containerd's message when the executable is not in the image (what `kubectl describe` shows).
START_ERROR = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    "runc create failed: unable to start container process: error during container init: "
    'exec: "{exe}": executable file not found in $PATH: unknown'
)
START_ERROR_EXIT_CODE = 128
NOT_FOUND_EXIT_CODE = 127

_SHELLS = frozenset({"sh", "bash", "ash", "dash", "zsh"})


@dataclass(frozen=True)
class Gpu:
    """One GPU the device plugin gave a container: its host index, UUID and NVML name."""

    index: int
    uuid: str
    name: str
    memory_mib: int = 0


@dataclass(frozen=True)
class Step:
    """One thing the process does: print `text`, sleep `seconds`, exit with `code`, or serve."""

    kind: str  # "out" | "sleep" | "exit" | "serve"
    text: str = ""
    seconds: float = 0.0
    code: int = 0


@dataclass(frozen=True)
class Program:
    """The steps of one container run; `start_error` when the process never starts."""

    steps: tuple[Step, ...]
    start_error: str | None = None


@dataclass(frozen=True)
class ContainerContext:
    """What the runtime knows when it starts a container."""

    pod_name: str
    image: str
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: Sequence[Gpu] = ()
    now: dt.datetime = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


# Startup lines of the long-running images the sim's charts ship (their real first lines).
_IMAGE_BANNERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("jupyter", (
        "[I {stamp} ServerApp] Jupyter Server 2.14.2 is running at:",
        "[I {stamp} ServerApp] http://{pod}:8888/lab",
    )),
    ("marimo", ("        Edit notebook at http://0.0.0.0:2718",)),
    ("vllm", ("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",)),
    ("llm-d", ("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",)),
    ("devbox", ("Server listening on 0.0.0.0 port 22.", "Server listening on :: port 22.")),
    ("devpod", ("Server listening on 0.0.0.0 port 22.", "Server listening on :: port 22.")),
    ("inference-gateway", ("{{\"level\":\"info\",\"msg\":\"listening\",\"addr\":\":8080\"}}",)),
)  # fmt: skip


def interpret(ctx: ContainerContext) -> Program:
    """The program a container runs (see the module docstring)."""
    argv = list(ctx.command) + list(ctx.args) if ctx.command else list(ctx.args)
    if not argv:
        return Program((*_banner(ctx), Step("serve")))
    exe = argv[0].rsplit("/", 1)[-1]
    if exe == "nvidia-smi" and not ctx.gpus:
        return Program((), START_ERROR.format(exe=argv[0]))
    if exe in _SHELLS and len(argv) >= 3 and argv[1] == "-c":
        return Program(tuple(_shell(argv[2], ctx)))
    steps = list(_simple(argv, ctx))
    if not steps or steps[-1].kind not in ("exit", "serve"):
        steps.append(Step("exit", code=0))
    return Program(tuple(steps))


def _banner(ctx: ContainerContext) -> list[Step]:
    stamp = ctx.now.strftime("%Y-%m-%d %H:%M:%S.") + f"{ctx.now.microsecond // 1000:03d}"
    for marker, lines in _IMAGE_BANNERS:
        if marker in ctx.image:
            text = "".join(f"{line.format(stamp=stamp, pod=ctx.pod_name)}\n" for line in lines)
            return [Step("out", text)]
    return []


# ---------------------------------------------------------------------- simple commands

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _simple(argv: list[str], ctx: ContainerContext) -> Iterator[Step]:
    """Steps of one command; ends with Step("exit") carrying its status, or Step("serve")."""
    exe = argv[0].rsplit("/", 1)[-1]
    args = argv[1:]
    if exe == "echo":
        newline = True
        while args and args[0] in ("-n", "-e", "-E"):
            newline = newline and args.pop(0) != "-n"
        yield Step("out", " ".join(args) + ("\n" if newline else ""))
        yield Step("exit", code=0)
    elif exe == "printf":
        yield Step("out", _printf(args))
        yield Step("exit", code=0)
    elif exe in ("true", ":"):
        yield Step("exit", code=0)
    elif exe == "false":
        yield Step("exit", code=1)
    elif exe == "exit":
        yield Step("exit", code=_int(args[0]) if args else 0)
    elif exe == "sleep":
        yield from _sleep(args)
    elif exe == "tail" and "-f" in args:
        yield Step("serve")
    elif exe == "nvidia-smi":
        if not ctx.gpus:
            # Only reachable inside a shell: the exec failed, the shell says so.
            yield Step("out", "sh: 1: nvidia-smi: not found\n")
            yield Step("exit", code=NOT_FOUND_EXIT_CODE)
        else:
            yield from _nvidia_smi(args, ctx)
    else:
        yield Step("serve")


def _sleep(args: list[str]) -> Iterator[Step]:
    total = 0.0
    for arg in args:
        if arg in ("infinity", "inf"):
            yield Step("serve")
            return
        match = _DURATION.match(arg)
        if match is None:
            yield Step("out", f"sleep: invalid time interval '{arg}'\n")
            yield Step("exit", code=1)
            return
        total += float(match.group(1)) * _UNITS[match.group(2)]
    yield Step("sleep", seconds=total)
    yield Step("exit", code=0)


def _int(text: str) -> int:
    try:
        return int(text) & 0xFF
    except ValueError:
        return 2


def _printf(args: list[str]) -> str:
    if not args:
        return ""
    fmt, values = args[0], list(args[1:])
    text = fmt.replace("\\n", "\n").replace("\\t", "\t")
    out = []
    parts = text.split("%s")
    for index, part in enumerate(parts):
        out.append(part)
        if index < len(parts) - 1:
            out.append(values.pop(0) if values else "")
    return "".join(out)


# ---------------------------------------------------------------------- nvidia-smi


def _nvidia_smi(args: list[str], ctx: ContainerContext) -> Iterator[Step]:
    if any(a in ("-L", "--list-gpus") for a in args):
        lines = [f"GPU {i}: {gpu.name} (UUID: {gpu.uuid})\n" for i, gpu in enumerate(ctx.gpus)]
        yield Step("out", "".join(lines))
        yield Step("exit", code=0)
        return
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    if query is not None:
        csv_format = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
        yield Step("out", _query(query.split(","), csv_format.split(","), ctx))
        yield Step("exit", code=0)
        return
    yield Step("out", _table(ctx))
    yield Step("exit", code=0)


def _query(fields: list[str], options: list[str], ctx: ContainerContext) -> str:
    def value(name: str, local: int, gpu: Gpu) -> str:
        units = "nounits" not in options
        return {
            "index": str(local),
            "name": gpu.name,
            "uuid": gpu.uuid,
            "memory.total": f"{gpu.memory_mib} MiB" if units else str(gpu.memory_mib),
            "driver_version": DRIVER_VERSION,
            "count": str(len(ctx.gpus)),
        }.get(name, "[N/A]")

    rows = []
    if "noheader" not in options:
        headers = {"memory.total": "memory.total [MiB]"}
        rows.append(", ".join(headers.get(f, f) for f in fields))
    for local, gpu in enumerate(ctx.gpus):
        rows.append(", ".join(value(f, local, gpu) for f in fields))
    return "".join(f"{row}\n" for row in rows)


_BAR = "+-----------------------------------------+------------------------+----------------------+"


def _table(ctx: ContainerContext) -> str:
    watts = {"hopper": 700, "ampere": 400, "ada-lovelace": 350}
    lines = [
        ctx.now.strftime("%a %b %d %H:%M:%S %Y") + "       ",
        "+-----------------------------------------------------------------------------------------+",
        f"| NVIDIA-SMI {DRIVER_VERSION:<22} Driver Version: {DRIVER_VERSION:<14} CUDA Version: {CUDA_VERSION:<9}|",
        "|-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]  # fmt: skip
    for local, gpu in enumerate(ctx.gpus):
        family = next((p.family for p in PRODUCTS.values() if p.smi_name == gpu.name), "")
        cap = watts.get(family, 300)
        memory = f"{1:>5}MiB / {gpu.memory_mib:>6}MiB"
        lines += [
            f"| {local:>3}  {gpu.name:<31}On  |   00000000:{0x18 + gpu.index:02X}:00.0 Off |                    0 |",
            f"| N/A   31C    P0 {f'{cap // 10}W / {cap:>4}W':>23} | {memory:>22} |      0%      Default |",
            "|                                         |                        |             Disabled |",
            _BAR,
        ]  # fmt: skip
    lines += [
        " " * 91,
        "+-----------------------------------------------------------------------------------------+",
        "| Processes:                                                                              |",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
        "|  No running processes found                                                             |",
        "+-----------------------------------------------------------------------------------------+",
    ]  # fmt: skip
    return "".join(f"{line}\n" for line in lines)


# ---------------------------------------------------------------------- sh -c

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*)|(\?))")


def _expand(script: str, env: Mapping[str, str]) -> str:
    """`$VAR`, `${VAR}` outside single quotes, as sh expands them (unknown: empty)."""
    out: list[str] = []
    quoted = False
    for piece in re.split(r"(')", script):
        if piece == "'":
            quoted = not quoted
            out.append(piece)
        elif quoted:
            out.append(piece)
        else:
            out.append(_VAR.sub(lambda m: env.get(m.group(1) or m.group(2) or "?", ""), piece))
    return "".join(out)


def _commands(script: str) -> list[tuple[str, list[str]]]:
    """(operator before it, argv) per command: operators are ";", "&&", "||"."""
    lexer = shlex.shlex(script.replace("\n", ";"), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[tuple[str, list[str]]] = []
    operator = ";"
    words: list[str] = []
    for token in lexer:
        if token in (";", "&&", "||", "|", ";;", "&"):
            if words:
                commands.append((operator, words))
            operator, words = (token if token in ("&&", "||", "|") else ";"), []
        else:
            words.append(token)
    if words:
        commands.append((operator, words))
    return commands


def _shell(script: str, ctx: ContainerContext) -> Iterator[Step]:
    env = {"HOSTNAME": ctx.pod_name, **ctx.env}
    try:
        commands = _commands(_expand(script, env))
    except ValueError as exc:  # unbalanced quotes: sh refuses the script
        yield Step("out", f"sh: 1: Syntax error: {exc}\n")
        yield Step("exit", code=2)
        return
    status = 0
    for index, (operator, argv) in enumerate(commands):
        piped = index + 1 < len(commands) and commands[index + 1][0] == "|"
        if operator == "|" or piped:
            # Pipelines are not interpreted: the sim cannot know what the next stage makes of
            # the output, so the container behaves as any program it does not know.
            yield Step("serve")
            return
        if (operator == "&&" and status != 0) or (operator == "||" and status == 0):
            continue
        if argv[0] == "exit":
            yield Step("exit", code=_int(argv[1]) if len(argv) > 1 else status)
            return
        for step in _simple(argv, ctx):
            if step.kind == "exit":
                status = step.code
            elif step.kind == "serve":
                yield step
                return
            else:
                yield step
    yield Step("exit", code=status)
