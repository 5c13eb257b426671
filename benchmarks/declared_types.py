"""What a declared output type costs: the same job with and without ``output_type``.

Issue 17: values are checked against a declared type (``map(f, output_type=...)``) with the
declared type's serializer, only on operators that declared one. This measures a map over
``--records`` ``(str, int)`` tuples on the in-process runner, declared as
``Types.TUPLE([Types.STRING(), Types.LONG()])`` vs undeclared, alternating runs, and
prints records/s and the ratio (same run, same machine).

Run: ``python -m benchmarks.declared_types [--records N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.results import Sitting, Table, add_result_option, record
from streamstate.common import Configuration, Types
from streamstate.datastream import StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink


def run(records: int, declared: bool) -> float:
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", str(records))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    data = [(f"k{i % 1000}", i) for i in range(records)]
    out_type = Types.TUPLE([Types.STRING(), Types.LONG()]) if declared else None
    env.from_collection(data).map(lambda v: (v[0], v[1] + 1), output_type=out_type).sink_to(
        DiscardingSink()
    )
    t0 = time.perf_counter()
    env.execute("declared" if declared else "undeclared")
    return records / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--repeat", type=int, default=3)
    add_result_option(p)
    a = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.declared_types", argv)
    best = {False: 0.0, True: 0.0}
    for _ in range(a.repeat):
        for declared in (False, True):
            best[declared] = max(best[declared], run(a.records, declared))
    print(f"map over {a.records:,} (str, int) records, in-process runner, best of {a.repeat}")
    print(f"undeclared output type      {best[False]:>12,.0f} records/s")
    print(f"output_type=TUPLE(STR, LONG){best[True]:>12,.0f} records/s")
    print(f"ratio declared/undeclared   {best[True] / best[False]:.2f}")
    if a.result:
        rows = (
            ("undeclared", f"{best[False]:,.0f}", "1.00"),
            ("declared output type", f"{best[True]:,.0f}", f"{best[True] / best[False]:.2f}"),
        )
        table = Table(("map", "records/s", "ratio to undeclared"), rows)
        record("declared_types", sitting.run([table]))


if __name__ == "__main__":
    main()
