"""``GET|PUT /jobs/<id>/resource-requirements``: Flink's adaptive scheduler's call, which
rescales a running job here at its next epoch boundary (docs/elastic.md).

The body is Flink's ``JobResourceRequirements``: per vertex ``{"parallelism":
{"lowerBound": L, "upperBound": U}}``. Vertices are named by operator uid (any operator of
a chain names its stage); the job runs at the upper bound. GET answers the parallelism
the job runs at now, in the same form (``lowerBound`` 1, and ``wholeJob``: whether a
whole-job rescale changes that operator). PUT answers 202 at once; the
rescale applies at the next epoch boundary (poll GET to see it). A request that cannot
apply is a 400 naming why (``RescaleError``).
"""

from __future__ import annotations

from typing import Any

from streamstate.errors import RescaleError
from streamstate.runtime.rescale import rescalable

__all__ = ["current_requirements", "requested_parallelism"]


def current_requirements(executor: Any) -> dict[str, Any]:
    """uid -> ``{"parallelism": {"lowerBound": 1, "upperBound": p}}`` of every operator,
    and ``"wholeJob": false`` for one a whole-job rescale leaves alone (a SourceFunction's
    source: ``rescale.rescalable``)."""
    return {
        n.uid: {
            "parallelism": {"lowerBound": 1, "upperBound": st.parallelism},
            "wholeJob": rescalable(st),
        }
        for st in executor.parts.plan.stages
        for n in st.nodes.values()
    }


def requested_parallelism(body: Any) -> dict[str, int]:
    """uid -> the parallelism a PUT body asks for (its upper bound); RescaleError when the
    body is not Flink's form."""
    if not isinstance(body, dict) or not body:
        raise RescaleError(
            'the body must map operator uids to {"parallelism": {"lowerBound": L, "upperBound": U}}'
        )
    out: dict[str, int] = {}
    for uid, req in body.items():
        bounds = req.get("parallelism") if isinstance(req, dict) else None
        upper = bounds.get("upperBound") if isinstance(bounds, dict) else None
        lower = bounds.get("lowerBound", 1) if isinstance(bounds, dict) else 1
        if isinstance(upper, bool) or not isinstance(upper, int):
            raise RescaleError(
                f'operator {uid!r}: expected {{"parallelism": {{"lowerBound": L, '
                f'"upperBound": U}}}} with integer bounds, got {req!r}'
            )
        if isinstance(lower, bool) or not isinstance(lower, int) or lower > upper:
            raise RescaleError(
                f"operator {uid!r}: lowerBound {lower!r} must be an integer <= upperBound {upper}"
            )
        out[str(uid)] = upper
    return out
