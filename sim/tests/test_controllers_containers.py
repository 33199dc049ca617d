"""The container interpreter: what a command prints, how long it runs and how it exits."""

from __future__ import annotations

import pytest

from sim.controllers.containers import (
    START_ERROR_EXIT_CODE,
    ContainerContext,
    Gpu,
    Program,
    interpret,
)

H100 = "NVIDIA H100 80GB HBM3"
TWO_GPUS = (Gpu(3, "GPU-aaa", H100, 81559), Gpu(5, "GPU-bbb", H100, 81559))


def _run(program: Program) -> tuple[str, float, int | None]:
    """(output, seconds slept, exit code or None when it runs forever)."""
    out, slept, code = "", 0.0, None
    for step in program.steps:
        if step.kind == "out":
            out += step.text
        elif step.kind == "sleep":
            slept += step.seconds
        elif step.kind == "exit":
            code = step.code
    return out, slept, code


@pytest.mark.parametrize(
    ("command", "args", "env", "expected"),
    [
        pytest.param(["echo", "hello", "world"], [], {}, ("hello world\n", 0.0, 0), id="echo"),
        pytest.param(["echo"], ["-n", "x"], {}, ("x", 0.0, 0), id="echo-n-args"),
        pytest.param(["/bin/true"], [], {}, ("", 0.0, 0), id="true"),
        pytest.param(["false"], [], {}, ("", 0.0, 1), id="false"),
        pytest.param(["sleep", "2"], [], {}, ("", 2.0, 0), id="sleep"),
        pytest.param(["sleep", "1m"], [], {}, ("", 60.0, 0), id="sleep-minutes"),
        pytest.param(["sleep", "infinity"], [], {}, ("", 0.0, None), id="sleep-infinity"),
        pytest.param(["tail", "-f", "/dev/null"], [], {}, ("", 0.0, None), id="tail-f"),
        pytest.param(["python", "train.py"], [], {}, ("", 0.0, None), id="unknown-runs-on"),
        pytest.param(["sh", "-c", "echo a; echo b"], [], {}, ("a\nb\n", 0.0, 0), id="sh-sequence"),
        pytest.param(["sh", "-c", "false && echo no || echo yes"], [], {}, ("yes\n", 0.0, 0), id="sh-and-or"),
        pytest.param(["/bin/bash", "-c", "echo start\nsleep 0.5\nexit 3"], [], {}, ("start\n", 0.5, 3), id="bash-newlines-exit"),
        pytest.param(["sh", "-c", "echo $GREETING ${WHO} '$WHO'"], [], {"GREETING": "hi", "WHO": "gpu"}, ("hi gpu $WHO\n", 0.0, 0), id="sh-vars"),
        pytest.param(["sh", "-c", "echo $HOSTNAME"], [], {}, ("pod-1\n", 0.0, 0), id="sh-hostname"),
        pytest.param(["sh", "-c", "echo x | wc -l"], [], {}, ("", 0.0, None), id="sh-pipeline-unknown"),
        pytest.param(["sh", "-c", "nvidia-smi -L"], [], {}, ("sh: 1: nvidia-smi: not found\n", 0.0, 127), id="sh-no-gpu"),
        pytest.param(["printf", "%s-%s\\n", "a", "b"], [], {}, ("a-b\n", 0.0, 0), id="printf"),
        pytest.param([], ["echo", "via-entrypoint"], {}, ("via-entrypoint\n", 0.0, 0), id="args-only"),
    ],
)  # fmt: skip
def test_commands(
    command: list[str],
    args: list[str],
    env: dict[str, str],
    expected: tuple[str, float, int | None],
) -> None:
    program = interpret(ContainerContext("pod-1", "busybox", command, args, env))
    assert program.start_error is None
    assert _run(program) == expected


def test_nvidia_smi_lists_the_containers_gpus_numbered_from_zero() -> None:
    program = interpret(ContainerContext("p", "cuda", ["nvidia-smi", "-L"], gpus=TWO_GPUS))
    assert _run(program) == (
        f"GPU 0: {H100} (UUID: GPU-aaa)\nGPU 1: {H100} (UUID: GPU-bbb)\n",
        0.0,
        0,
    )


def test_nvidia_smi_query_csv() -> None:
    argv = ["nvidia-smi", "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"]
    program = interpret(ContainerContext("p", "cuda", argv, gpus=TWO_GPUS))
    assert _run(program)[0] == "0, GPU-aaa, 81559\n1, GPU-bbb, 81559\n"


def test_nvidia_smi_table_shows_every_gpu() -> None:
    out, _, code = _run(interpret(ContainerContext("p", "cuda", ["nvidia-smi"], gpus=TWO_GPUS)))
    assert code == 0
    assert "Driver Version: 570.133.20" in out
    assert out.count(H100) == 2
    widths = {len(line) for line in out.splitlines()[1:]}
    assert widths == {91}, "every table line is as wide as nvidia-smi's"


def test_nvidia_smi_without_gpus_fails_to_start() -> None:
    program = interpret(ContainerContext("p", "cuda", ["nvidia-smi", "-L"]))
    assert program.steps == ()
    assert program.start_error is not None
    assert 'exec: "nvidia-smi": executable file not found in $PATH' in program.start_error
    assert START_ERROR_EXIT_CODE == 128


@pytest.mark.parametrize(
    ("image", "first_line"),
    [
        pytest.param("vllm/vllm-openai:v0.9.1", "INFO:     Uvicorn running on http://0.0.0.0:8000", id="vllm"),
        pytest.param("ghcr.io/colony-dev/devbox:1.0.0", "Server listening on 0.0.0.0 port 22.", id="devbox"),
        pytest.param("registry.k8s.io/pause:3.10", None, id="silent"),
    ],
)  # fmt: skip
def test_images_without_command_serve(image: str, first_line: str | None) -> None:
    out, _, code = _run(interpret(ContainerContext("p", image)))
    assert code is None
    if first_line is None:
        assert out == ""
    else:
        assert out.startswith(first_line)
