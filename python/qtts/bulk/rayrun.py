"""The --ray runner: the pending items through Ray Data (docs/bulk.md, "How it runs").

from_items (the validated items, one flat row each) -> map_batches(qtts.ray.Synthesizer) on an
actor pool of `jobs` actors, each loading the model once with its share of the threads -> the
rows stream back to the driver, which writes the audio files and the results table exactly as
the local runners do (so the files are the same bytes). `address` joins a running cluster
(the model path must then exist on every node, or be a Hugging Face repo id); without it a
local Ray instance with jobs x threads CPUs is started and shut down again."""
from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterator
from typing import Any

from ..errors import QttsError
from ..runtime.aligner.subtitles import from_word_list
from .local import ModelSpec, split_threads
from .manifest import Item
from .synth import Finished


def import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ImportError("--ray needs Ray Data: pip install 'qtts[ray]' (or pip install 'ray[data]')") from None
    return ray


class RayRunner:
    def __init__(self, spec: ModelSpec, jobs: int, max_batch: int, address: str | None = None) -> None:
        self.threads = split_threads(spec.options.n_threads, jobs)
        self.spec, self.jobs, self.max_batch, self.address = spec, jobs, max_batch, address
        self.memory: dict[int, dict[str, float]] = {}

    def actor_kwargs(self) -> dict[str, Any]:
        """qtts.ray.Synthesizer's constructor arguments: every load option, each actor with its
        share of the threads."""
        return dict(model=self.spec.model, max_batch=self.max_batch,
                    **self.spec.with_threads(self.threads).options.kwargs())

    def run(self, items: list[Item]) -> Iterator[Finished]:
        ray = import_ray()
        started = not ray.is_initialized()
        if started:
            ray.init(address=self.address, num_cpus=None if self.address else self.jobs * self.threads,
                     include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
                     configure_logging=True)
        try:
            yield from self._run(ray, items)
        except ray.exceptions.RayError as e:  # an actor that died or could not start: not one item's fault
            raise QttsError(f"the Ray run failed: {e}") from e
        finally:
            if started:
                ray.shutdown()

    def _run(self, ray: Any, items: list[Item]) -> Iterator[Finished]:
        from ..ray import Synthesizer, plain

        logging.getLogger("ray.data").setLevel(logging.ERROR)  # the command reports progress itself
        # fewer items than actors is fine: Ray's advice to add blocks is noise here
        warnings.filterwarnings("ignore", message="The minimum number of concurrent actors", category=UserWarning)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        kwargs = self.actor_kwargs()
        blocks = min(len(items), max(self.jobs, -(-len(items) // self.max_batch)))  # a block per batch
        ds = ray.data.from_items([item.row() for item in items], override_num_blocks=blocks)
        ds = ds.map_batches(Synthesizer, fn_constructor_kwargs=kwargs,
                            compute=ray.data.ActorPoolStrategy(size=self.jobs), batch_size=self.max_batch,
                            num_cpus=self.threads, batch_format="numpy")
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for i in range(len(batch["id"])):
                # an all-null column (error, when every row succeeded) comes back as NaN floats
                cell = {k: plain(v[i]) for k, v in batch.items() if k != "audio"}
                error = None if cell["error"] is None else str(cell["error"])
                yield Finished(str(cell["id"]), None if cell["seed"] is None else int(cell["seed"]),
                               int(cell["sample_rate"]), None if error is not None else batch["audio"][i],
                               int(cell["frames"]), cell["stop_reason"], json.loads(cell["timings"]), error,
                               None if cell["words"] is None else from_word_list(json.loads(cell["words"])))
