"""Reading a k0rdent ServiceSet's status: whether it speaks of the spec Colony last wrote.

Only what k0rdent's ServiceSet CRD defines counts: the conditions' `observedGeneration` (of the
status and of each service). A status-level `observedGeneration` is not in the CRD, so a real API
server prunes it and Colony must not read it (`sim/tests/test_apiserver_pruning.py` shows the
pruning).
"""

from __future__ import annotations

from typing import Any

import pytest

from activities.management.service_sets import service_set_observed


def service_set(
    generation: int,
    *conditions: int | None,
    service_conditions: tuple[int, ...] = (),
    status_level: int | None = None,
) -> Any:
    status: dict[str, Any] = {
        "conditions": [
            {"type": "ServicesInReadyState", "status": "True"}
            | ({} if observed is None else {"observedGeneration": observed})
            for observed in conditions
        ],
        "services": [
            {
                "name": "nb",
                "state": "Deployed",
                "conditions": [
                    {"type": "Ready", "status": "True", "observedGeneration": observed}
                    for observed in service_conditions
                ],
            }
        ],
    }
    if status_level is not None:
        status["observedGeneration"] = status_level
    return {"metadata": {"generation": generation}, "status": status}


@pytest.mark.parametrize(
    ("obj", "wanted", "current"),
    [
        pytest.param(service_set(2, 2), 2, True, id="condition-observed-the-generation"),
        pytest.param(service_set(3, 3), 2, True, id="condition-observed-a-later-one"),
        pytest.param(service_set(2, 1), 2, False, id="condition-from-the-previous-install"),
        pytest.param(service_set(2, 1, 2), 2, True, id="one-condition-caught-up"),
        pytest.param(service_set(2, None), 2, True, id="no-observed-generation-nothing-to-compare"),
        pytest.param({"metadata": {}}, 2, True, id="no-status-yet-states-empty-anyway"),
        pytest.param(
            service_set(2, 1, service_conditions=(2,)), 2, True, id="a-service-condition-caught-up"
        ),
        pytest.param(
            service_set(2, None, service_conditions=(1,)), 2, False, id="service-condition-stale"
        ),
        # Not in k0rdent's CRD: whatever it says, the conditions decide.
        pytest.param(
            service_set(2, 1, status_level=2), 2, False, id="status-level-field-not-read-stale"
        ),
        pytest.param(
            service_set(2, 2, status_level=1), 2, True, id="status-level-field-not-read-current"
        ),
        pytest.param(service_set(2, 1), 0, True, id="any-generation-asked"),
    ],
)
def test_a_status_is_current_only_for_the_generation_written(
    obj: Any, wanted: int, current: bool
) -> None:
    assert service_set_observed(obj, wanted) is current
