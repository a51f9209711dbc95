"""A 16-step fan-out of trivial ops, runnable under any executor (benchmark code location)."""

from dagster import Definitions, In, graph, multiprocess_executor, op

from k8s_ai_orchestrator import ai_executor, compute

FANOUT = 16


def _leaf(i: int):  # type: ignore[no-untyped-def]
    @op(name=f"leaf_{i}", tags=compute("xs"))
    def leaf() -> int:
        return i

    return leaf


leaves = [_leaf(i) for i in range(FANOUT)]


@op(ins={f"in_{i}": In(int) for i in range(FANOUT)}, tags=compute("xs"))
def gather(**values: int) -> int:
    return sum(values.values())


@graph
def fanout() -> None:
    gather(**{f"in_{i}": leaf() for i, leaf in enumerate(leaves)})


fanout_ai = fanout.to_job(name="fanout_ai", executor_def=ai_executor)
fanout_multiprocess = fanout.to_job(name="fanout_multiprocess", executor_def=multiprocess_executor)

defs = Definitions(jobs=[fanout_ai, fanout_multiprocess])
