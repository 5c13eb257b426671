"""A job script whose record class lives in ``__main__`` (run as a script by the tests)."""

import sys
from dataclasses import dataclass

from streamstate.common import Configuration
from streamstate.datastream import StreamExecutionEnvironment


@dataclass
class Order:
    user: str
    amount: int


if __name__ == "__main__":
    conf = Configuration()
    conf.set_string("execution.runner.spark.subtask-hosts", sys.argv[1])
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    orders = [Order(u, a) for u, a in [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)]]
    ds = env.from_collection(orders)
    reduced = ds.key_by(lambda o: o.user).reduce(lambda a, b: Order(a.user, a.amount + b.amount))
    reduced.print()
    with reduced.execute_and_collect("main-classes") as results:
        print("COLLECTED", sorted((o.user, o.amount) for o in results))
